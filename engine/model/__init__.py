"""The model and what runs it on the device: the Llama-family decoder (model, layers), the paged
KV cache, the attention backends (torch and Triton), the measured matmul plan, CUDA graphs."""
