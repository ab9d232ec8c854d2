#!/usr/bin/env python3
"""gpu-bench.py DIR [--out JSON] — flash-linear-attention's chunk_gated_delta_rule on the exact
inputs `hsdiff selftest --bench --bench-dir DIR` wrote (DIR/Hv{Hv}-T{T}/{q,k,v,beta}.bf16, g.f32,
hsdiff_out.bf16 (the tensor-core kernel's output), meta.json (both hsdiff kernels' timings),
truth_out.f64 for the smallest T), timed the same way (CUDA events around each call, warm-up,
median), and compared with hsdiff's output and the f64 truth. Speeds: fla time / hsdiff time
per hsdiff kernel (tc = tensor cores, what the backend runs for bf16; exact = the f32 kernel),
and TFLOP/s from the same nominal FLOP count hsdiff prints (meta.json's nominal_flops).

Runs on the GPU machine (PyTorch + Triton there; fla-core carried as wheels, see
scripts/gpu-check.sh). Prints a table and writes JSON (--out). Exit 0 unless fla cannot run.
"""
import argparse
import inspect
import json
import math
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--out")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget-ms", type=float, default=3000.0)
    a = ap.parse_args()

    import torch

    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    try:
        import fla

        fla_version = getattr(fla, "__version__", "?")
    except Exception:  # noqa: BLE001
        fla_version = "?"
    import triton

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    info = {
        "gpu": props.name,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "fla": fla_version,
        "cuda_runtime": torch.version.cuda,
        "driver": _driver_version(),
        "signature": str(inspect.signature(chunk_gated_delta_rule)),
    }
    print(json.dumps(info, indent=1))

    # Copy bandwidth seen by torch, for the same bytes-moved ratio hsdiff prints.
    buf = torch.empty(1 << 28, dtype=torch.float32, device=dev)  # 1 GiB
    dst = torch.empty_like(buf)
    bw_times = []
    for i in range(12):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(buf)
        e.record()
        e.synchronize()
        if i >= 2:
            bw_times.append(s.elapsed_time(e))
    bw = 2 * buf.numel() * 4 / (statistics.median(bw_times) * 1e-3) / 1e9
    del buf, dst
    print(f"torch copy bandwidth: {bw:.0f} GB/s")

    rows = []
    cases = []
    for name in os.listdir(a.dir):
        mpath = os.path.join(a.dir, name, "meta.json")
        if os.path.exists(mpath):
            m = json.load(open(mpath))
            cases.append(((m["Hv"], m["T"]), name))
    cases = [name for _, name in sorted(cases)]
    if not cases:
        sys.exit(f"no case folders in {a.dir}: run hsdiff selftest --bench --bench-dir {a.dir}")
    hdr = (
        f"{'Hk/Hv':>6} {'T':>7} {'tc ms':>9} {'exact ms':>9} {'fla ms':>9} {'fla/tc':>7} "
        f"{'fla/exact':>9} {'tc TF/s':>8} {'fla TF/s':>8} {'fla GB/s':>8} {'fla vs truth':>12} "
        f"{'tc vs truth':>11} {'fla vs tc':>9}"
    )
    print(hdr)
    for case in cases:
        d = os.path.join(a.dir, case)
        meta = json.load(open(os.path.join(d, "meta.json")))
        B, T, Hk, Hv, dk, dv = (meta[x] for x in ("B", "T", "Hk", "Hv", "dk", "dv"))

        def load(name, dtype, shape):
            raw = bytearray(open(os.path.join(d, name), "rb").read())
            return torch.frombuffer(raw, dtype=dtype).reshape(shape).to(dev)

        q = load("q.bf16", torch.bfloat16, (B, T, Hk, dk))
        k = load("k.bf16", torch.bfloat16, (B, T, Hk, dk))
        v = load("v.bf16", torch.bfloat16, (B, T, Hv, dv))
        g = load("g.f32", torch.float32, (B, T, Hv))
        beta = load("beta.bf16", torch.bfloat16, (B, T, Hv))
        hs_out = load("hsdiff_out.bf16", torch.bfloat16, (B, T, Hv, dv))
        scale = 1.0 / math.sqrt(dk)

        gva = True

        def call():
            nonlocal gva
            qq, kk = q, k
            if not gva:  # older fla without grouped value heads: what transformers does
                qq = q.repeat_interleave(Hv // Hk, dim=2)
                kk = k.repeat_interleave(Hv // Hk, dim=2)
            return chunk_gated_delta_rule(
                qq, kk, v, g, beta, scale=scale, initial_state=None,
                output_final_state=True, use_qk_l2norm_in_kernel=True,
            )

        t0 = time.time()
        try:
            o, _ = call()
        except Exception as ex:  # noqa: BLE001
            print(f"GVA call failed ({ex!r}); retrying with q/k repeat_interleave'd to {Hv} heads")
            gva = False
            o, _ = call()
        torch.cuda.synchronize()
        first_s = time.time() - t0
        for _ in range(a.warmup):
            call()
        torch.cuda.synchronize()
        times = []

        def timed():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            call()
            e.record()
            e.synchronize()
            return s.elapsed_time(e)

        one = timed()
        n = max(5, min(50, int(a.budget_ms / max(one, 1e-3))))
        times = sorted(timed() for _ in range(n))
        med = statistics.median(times)
        o, _ = call()
        o = o.reshape(B, T, Hv, dv)

        def rel(x, y):
            x, y = x.double(), y.double()
            return (torch.linalg.vector_norm(x - y) / torch.linalg.vector_norm(y)).item()

        fla_vs_hs = rel(o, hs_out)
        fla_vs_truth = hs_vs_truth = None
        tpath = os.path.join(d, "truth_out.f64")
        if os.path.exists(tpath):
            nh = meta["truth_heads"]
            truth = load("truth_out.f64", torch.float64, (T, nh, dv))
            fla_vs_truth = rel(o[0, :, :nh], truth)
            hs_vs_truth = rel(hs_out[0, :, :nh], truth)
        kernels = meta.get("kernels", {})
        hs_med = meta["hsdiff_ms_median"]
        exact_med = kernels.get("exact", {}).get("ms_median")
        gbs = meta["bytes_moved"] / (med * 1e-3) / 1e9
        flops = meta.get("nominal_flops")
        tf = lambda ms: "-" if not flops else f"{flops / (ms * 1e-3) / 1e12:.2f}"  # noqa: E731
        f = lambda x: "-" if x is None else f"{x:.3e}"  # noqa: E731
        ex = "-" if exact_med is None else f"{exact_med:.3f}"
        ex_speed = "-" if exact_med is None else f"{med / exact_med:.2f}"
        print(
            f"{f'{Hk}/{Hv}':>6} {T:>7} {hs_med:>9.3f} {ex:>9} {med:>9.3f} {med / hs_med:>7.2f} "
            f"{ex_speed:>9} {tf(hs_med):>8} {tf(med):>8} {gbs:>8.0f} {f(fla_vs_truth):>12} "
            f"{f(hs_vs_truth):>11} {fla_vs_hs:>9.2e}"
        )
        rows.append({
            "Hk": Hk, "Hv": Hv, "T": T, "hsdiff_kernel": meta.get("hsdiff_kernel"),
            "hsdiff_ms_median": hs_med, "hsdiff_exact_ms_median": exact_med,
            "fla_ms_median": med, "fla_ms_all": times,
            "speed_hsdiff_over_fla": med / hs_med,
            "speed_exact_over_fla": None if exact_med is None else med / exact_med,
            "fla_gbs": gbs, "bytes_moved": meta["bytes_moved"], "nominal_flops": flops,
            "fla_tflops": None if not flops else flops / (med * 1e-3) / 1e12,
            "hsdiff_tflops": None if not flops else flops / (hs_med * 1e-3) / 1e12,
            "fla_first_call_s": first_s, "fla_gva": gva,
            "fla_vs_truth": fla_vs_truth, "hsdiff_vs_truth": hs_vs_truth, "fla_vs_hsdiff": fla_vs_hs,
            "hsdiff_copy_bw_gbs": meta.get("copy_bw_gbs"),
        })
        del q, k, v, g, beta, hs_out, o
        torch.cuda.empty_cache()
    result = {"info": info, "torch_copy_bw_gbs": bw, "rows": rows}
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(result, fh, indent=1)
    print("fla/tc, fla/exact: fla time / hsdiff time (>= 1.0 means hsdiff is at least as fast)")


def _driver_version():
    try:
        import subprocess

        return subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        ).stdout.strip()
    except Exception:  # noqa: BLE001
        return "?"


if __name__ == "__main__":
    main()
