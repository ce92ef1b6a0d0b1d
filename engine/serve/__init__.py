"""Real-time serving: the loop that replays arrivals and steps the engine under a scheduling
policy (loop), the workloads it serves, the trace of every token and step, and the metrics
computed from that trace."""
