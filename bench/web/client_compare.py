"""`python -m engine bench-client` beside GuideLLM on the same server and the same workload:
TTFT, ITL and output throughput as each tool measures them, every round printed.

One `python -m engine serve` (tiny preset by default) is started on a free port of 127.0.0.1
with a cache of its own; each round runs both clients against it, one after the other (their
order alternates between rounds, so neither always meets a warmer server), with the same load:
`--concurrency` streams in a closed loop (bench-client --max-concurrency, GuideLLM's concurrent
profile), `--requests` requests of `--prompt-len` prompt tokens and `--output-len` output tokens.
Each tool's figures are its own: bench-client's under vLLM's key names (mean TTFT, TPOT and ITL
in ms, output tokens per second), GuideLLM's from its JSON report (means over successful
requests; its inter-token latency is per request, (last - first) / (tokens - 1), which is
vLLM's TPOT, so the two TPOTs are compared). The ratios ours / GuideLLM's are the result: how
far two independent clients agree on one server.

GuideLLM is not a dependency of the project (it pulls transformers and datasets): install it
in a virtual environment of its own that sees this one's packages, and pass its command:

    python -m venv .gl && echo "$(python -c 'import site; print(site.getsitepackages()[0])')" \\
        > .gl/lib/python3.11/site-packages/project.pth
    .gl/bin/pip install guidellm
    python bench/web/client_compare.py --guidellm .gl/bin/guidellm --rounds 3

GuideLLM needs the model's tokenizer to make prompts of exact lengths: the script writes the
tiny preset's tokenizer.json with a tokenizer_config.json into a folder and passes it as the
processor. Standard library only (the two clients run as subprocesses).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.harness import Run  # noqa: E402
from bench.web.served_app import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "assets" / "tiny" / "tokenizer.json"
START_TIMEOUT_S = 300
RUN_TIMEOUT_S = 900


def start_engine_server(cache: str, preset: str, max_batch: int) -> tuple[subprocess.Popen, str]:
    """`python -m engine serve` on a free port; (process, base URL) once /health answers."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "serve", "--preset", preset, "--port", str(port),
         "--max-batch", str(max_batch)],
        cwd=ROOT, env={**os.environ, "LLM_SPEED_CACHE": cache},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"engine serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return proc, url
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)  # polling a server that is starting up
    proc.kill()
    raise TimeoutError(f"engine serve did not answer within {START_TIMEOUT_S} s")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def processor_dir(folder: Path) -> Path:
    """A folder transformers loads as the tiny model's tokenizer (PreTrainedTokenizerFast)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(TOKENIZER, folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
         "model_max_length": 2048}))
    return folder


def run_bench_client(url: str, args, out: Path) -> dict:
    """bench-client's figures under vLLM's keys (its --result-json file)."""
    cmd = [sys.executable, "-m", "engine", "bench-client", "--base-url", url + "/v1",
           "--model", args.preset, "--rate", "inf", "--max-concurrency", str(args.concurrency),
           "--requests", str(args.requests), "--prompt-len", str(args.prompt_len),
           "--output-len", str(args.output_len), "--result-json", str(out), "--json"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"bench-client failed: {done.stderr.strip()[-500:]}")
    r = json.loads(out.read_text())
    return {"ttft_ms": r["mean_ttft_ms"], "tpot_ms": r["mean_tpot_ms"],
            "itl_ms": r["mean_itl_ms"], "output_tok_s": r["output_throughput"],
            "completed": r["completed"]}


def run_guidellm(command: str, url: str, processor: Path, args, out_dir: Path) -> dict:
    """GuideLLM's figures for the same load (its `run` command, forced output lengths, the
    completions route as bench-client uses), read from its JSON report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "report.json"
    cmd = [command, "run",
           "--backend", f"kind=openai_http,target={url},model={args.preset},"
                        "request_format=/v1/completions",
           "--profile", f"kind=concurrent,streams={args.concurrency}",
           "--constraint", f"kind=max_requests,count={args.requests}",
           "--tokenizer", f"kind=hf_auto,model={processor}",
           "--data", f"kind=synthetic_text,prompt_tokens={args.prompt_len},"
                     f"output_tokens={args.output_len}",
           "--output", f"kind=json,path={report}", "--disable-console-interactive"]
    done = subprocess.run(cmd, cwd=out_dir, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode != 0 or not report.exists():
        raise RuntimeError(f"guidellm failed: {(done.stderr or done.stdout).strip()[-800:]}")
    return guidellm_figures(json.loads(report.read_text()))


def guidellm_figures(report: dict) -> dict:
    """TTFT and ITL (ms, means over successful requests) and output tokens per second of a
    report's one benchmark. GuideLLM's ITL is per request (last token - first) / (tokens - 1),
    vLLM's TPOT, so it is set beside bench-client's TPOT."""
    [bench] = report["benchmarks"]
    m = bench["metrics"]

    def mean(name: str) -> float:
        return m[name]["successful"]["mean"]

    return {"ttft_ms": mean("time_to_first_token_ms"), "tpot_ms": mean("inter_token_latency_ms"),
            "output_tok_s": mean("output_tokens_per_second"),
            "completed": m["request_totals"]["successful"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--guidellm", default="guidellm", help="GuideLLM's command (default: on PATH)")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=24)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--cache", default=None,
                   help="the server's results cache (its plans); default: a fresh one")
    args = p.parse_args(argv)
    if shutil.which(args.guidellm) is None:
        print(f"error: GuideLLM's command {args.guidellm!r} not found: install it (see this "
              "file's docstring) and pass --guidellm", file=sys.stderr)
        return 2
    run = Run("client_compare", args)
    work = Path(tempfile.mkdtemp(prefix="client-compare-"))
    proc, url = start_engine_server(args.cache or str(work / "cache"), args.preset,
                                    max(8, args.concurrency))
    processor = processor_dir(work / "processor")
    ratios: dict[str, list[float]] = {"ttft": [], "tpot": [], "output_tok_s": []}
    try:
        for i in range(args.rounds):
            order = ("ours", "guidellm") if i % 2 == 0 else ("guidellm", "ours")
            got = {}
            for tool in order:
                if tool == "ours":
                    got[tool] = run_bench_client(url, args, work / f"ours-{i}.json")
                else:
                    got[tool] = run_guidellm(args.guidellm, url, processor, args,
                                             work / f"guidellm-{i}")
            ours, theirs = got["ours"], got["guidellm"]
            for key, name in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"),
                              ("output_tok_s", "output_tok_s")):
                ratios[name].append(ours[key] / theirs[key])
            run.round({"round": i + 1, "order": list(order), "bench_client": ours,
                       "guidellm": theirs},
                      f"round {i + 1} ({' then '.join(order)}): bench-client TTFT "
                      f"{ours['ttft_ms']:.1f} ms, TPOT {ours['tpot_ms']:.2f} ms, ITL "
                      f"{ours['itl_ms']:.2f} ms, {ours['output_tok_s']:.1f} tok/s | GuideLLM "
                      f"TTFT {theirs['ttft_ms']:.1f} ms, ITL (per request: TPOT) "
                      f"{theirs['tpot_ms']:.2f} ms, {theirs['output_tok_s']:.1f} tok/s")
    finally:
        stop(proc)
    median = {k: sorted(v)[len(v) // 2] for k, v in ratios.items()}
    return run.finish({"ratios_ours_over_guidellm": ratios, "median_ratio": median})


if __name__ == "__main__":
    sys.exit(main())
