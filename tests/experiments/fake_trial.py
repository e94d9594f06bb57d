"""A stand-in for ``sopt run`` / ``sopt resume`` that follows the run directory contract, for the sweep tests.

    python fake_trial.py run CONFIG [KEY=VALUE ...] --out DIR --no-progress
    python fake_trial.py resume DIR --no-progress

The config (TOML) holds ``problem``, ``steps``, ``log_every``, ``checkpoint_every``, ``sleep`` (seconds per step),
``x``, ``y`` (the swept parameters), ``fail_x`` and ``fail_step`` (the run with ``x == fail_x`` fails at that
step; the environment variable ``FAKE_FAIL_X``, when set, overrides ``fail_x``). Each step's loss is
``(x + y) * 0.97 ** step``, so every curve and final metric is known. SIGTERM: the current step finishes, a
checkpoint is written, summary.json says "interrupted", exit 0; ``resume`` continues from the checkpoint (metrics
records after it are dropped) to the same final metrics. With ``FAKE_TRIAL_LOG`` set,
each start appends ``{"event": "start", "action", "dir", "cuda", "pid", "time"}`` to that file (JSON lines) and
each exit ``{"event": "end", "dir", "pid", "time"}``.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sys
import time
import tomllib

DEFAULTS = {"steps": 20, "log_every": 1, "checkpoint_every": 5, "sleep": 0.0, "x": 1.0, "y": 0.0,
            "fail_x": None, "fail_step": 3}


def loss(config: dict, step: int) -> float:
    return (config["x"] + config["y"]) * 0.97 ** step


def write_json(path: pathlib.Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def parse_value(text: str):
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def summary(run_dir: pathlib.Path, config: dict, status: str, step: int, metrics: dict, error=None) -> None:
    write_json(run_dir / "summary.json", {
        "problem": config["problem"], "status": status, "steps": step, "total_steps": config["steps"],
        "time_s": 0.0, "metrics": metrics, "error": error, "pid": os.getpid(),
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S")})


def log_event(event: dict) -> None:
    if os.environ.get("FAKE_TRIAL_LOG"):
        with open(os.environ["FAKE_TRIAL_LOG"], "a") as f:
            f.write(json.dumps({**event, "pid": os.getpid(), "time": time.time()}) + "\n")


def main(argv: list[str]) -> int:
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    action, rest = argv[0], [a for a in argv[1:] if a != "--no-progress"]
    if action == "run":
        out = pathlib.Path(rest[rest.index("--out") + 1])
        rest = rest[:rest.index("--out")] + rest[rest.index("--out") + 2:]
        config = {**DEFAULTS, **tomllib.loads(pathlib.Path(rest[0]).read_text())}
        for token in rest[1:]:
            key, value = token.split("=", 1)
            key = key.lstrip("+")
            if key not in config:
                print(f"error: override {key}: unknown key", file=sys.stderr)
                return 2
            config[key] = parse_value(value)
        if out.exists() and any(out.iterdir()):
            print(f"error: --out {out}: not empty", file=sys.stderr)
            return 2
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "config.json", config)
        (out / "overrides.txt").write_text("\n".join(rest[1:]) + "\n")
        start = 0
    else:
        out = pathlib.Path(rest[0])
        config = json.loads((out / "config.json").read_text())
        start = json.loads((out / "checkpoint.json").read_text())["step"] if (out / "checkpoint.json").exists() \
            else 0
        kept = [line for line in (out / "metrics.jsonl").read_text().splitlines()
                if json.loads(line)["step"] <= start] if (out / "metrics.jsonl").exists() else []
        (out / "metrics.jsonl").write_text("".join(line + "\n" for line in kept))
    if os.environ.get("FAKE_FAIL_X"):
        config["fail_x"] = parse_value(os.environ["FAKE_FAIL_X"])
    log_event({"event": "start", "action": action, "dir": str(out), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")})
    try:
        return train(out, config, start, stop)
    finally:
        log_event({"event": "end", "dir": str(out)})


def train(out: pathlib.Path, config: dict, start: int, stop: list[int]) -> int:
    summary(out, config, "running", start, {})
    metrics: dict = {}
    for step in range(start + 1, config["steps"] + 1):
        time.sleep(config["sleep"])
        if config["fail_x"] is not None and config["x"] == config["fail_x"] and step == config["fail_step"]:
            summary(out, config, "failed", step - 1, metrics, f"diverged at step {step} (x = {config['x']})")
            print(f"error: the loss diverged at step {step}", file=sys.stderr)
            return 1
        metrics = {"step": step, "loss": loss(config, step), "lr": 0.1, "time_s": 0.0}
        if step % config["log_every"] == 0 or step == config["steps"]:
            with open(out / "metrics.jsonl", "a") as f:
                f.write(json.dumps(metrics) + "\n")
        if step % config["checkpoint_every"] == 0 or stop or step == config["steps"]:
            write_json(out / "checkpoint.json", {"step": step})
            if stop and step < config["steps"]:
                summary(out, config, "interrupted", step, metrics)
                print(f"interrupted at step {step}; resume with: sopt resume {out}")
                return 0
            summary(out, config, "running", step, metrics)
    summary(out, config, "finished", config["steps"], {**metrics, "final_x": config["x"]})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
