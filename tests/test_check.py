"""`kernelscope check` on pairs of real sample traces (README's store, `sample_runs`): a regression fails, an
improvement or the same trace passes, a change inside the noise band (the spread of repeated traces, or of a
trace's steady ProfilerStep times) does not fail, level rules on bound's shares, the baseline file, Markdown.
Every expected number is read independently: latency from the summary analysis, step spread from the steps
table's steady rows, shares from bound."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kernelscope.analysis import get_analysis
from kernelscope.cli import cli
from kernelscope.errors import UsageError
from kernelscope.storage.queries import list_traces, resolve_trace
from kernelscope.storage.store import open_store


@pytest.fixture(scope="module")
def db(sample_runs):
    return str(sample_runs.db)


@pytest.fixture(scope="module")
def facts(db):
    """Independent numbers: each trace's latency (summary), steady step times (steps table) and bound share."""
    names = ["llama_prefill_b1", "llama_prefill_b8", "train_step", "vm_534.step1", "vm_535.step1",
             "small_kernels_eager", "qwen2_infer"]
    out = {}
    with open_store(db, read_only=True) as store:
        for n in names:
            tid = resolve_trace(store, n)
            steps = get_analysis("steps").fn(store, tid).tables["steps"]
            steady = steps[~steps["warmup"].astype(bool) & ~steps["partial"].astype(bool)]["dur_ns"].tolist()
            out[n] = {"id": tid, "latency": get_analysis("summary").fn(store, tid).scalars["latency_ns"],
                      "steady": steady}
        out["llama_prefill_b8"]["host_wait_share"] = get_analysis("bound").fn(
            store, out["llama_prefill_b8"]["id"]).scalars["host_wait_share"]
    return out


def check(db, *args):
    res = CliRunner().invoke(cli, ["check", *args, "--db", db, "--json"])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.stdout)


def pct(a, b):
    return 100.0 * (b - a) / a


def test_regression_fails_improvement_and_same_trace_pass(db, facts):
    b1, b8 = facts["llama_prefill_b1"]["latency"], facts["llama_prefill_b8"]["latency"]
    assert pct(b8, b1) > 5 > pct(b1, b8)  # b1 is the slower one: the rule fails one way only
    code, out = check(db, "llama_prefill_b1", "--baseline", "llama_prefill_b8", "--rule", "latency_ns>+5%")
    assert code == 1 and out["passed"] is False
    (v,) = out["rules"]
    assert v["status"] == "fail" and v["change"] == pytest.approx(pct(b8, b1)) and v["noise_pct"] is None
    code, out = check(db, "llama_prefill_b8", "--baseline", "llama_prefill_b1", "--rule", "latency_ns>+5%")
    assert code == 0 and out["rules"][0]["status"] == "pass"
    code, out = check(db, "train_step", "--baseline", "train_step", "--rule", "latency_ns>+0%",
                      "--rule", "tklqt_ns>+0%", "--rule", "busy_ns<-1")
    assert code == 0 and [v["status"] for v in out["rules"]] == ["pass"] * 3
    assert all(r["delta"] == 0 for r in out["headline"])


def test_change_inside_the_step_noise_does_not_fail(db, facts):
    """small_kernels_eager has 5 steady ProfilerSteps; qwen2_infer's latency is 3.6% above its own, inside
    the 3.75% spread of those steps: the broken +2% rule is reported, not failed. A +1% rule between the
    two tb_ddp workers (one step each: no noise band) does fail at +3.06%."""
    base, new = facts["small_kernels_eager"], facts["qwen2_infer"]
    steady = base["steady"]
    noise = 100.0 * (max(steady) - min(steady)) / sorted(steady)[len(steady) // 2]
    change = pct(base["latency"], new["latency"])
    assert len(steady) == 5 and 2 < change < noise
    code, out = check(db, "qwen2_infer", "--baseline", "small_kernels_eager", "--rule", "latency_ns>+2%")
    (v,) = out["rules"]
    assert code == 0 and v["status"] == "inside_noise"
    assert v["noise_pct"] == pytest.approx(noise) and v["change"] == pytest.approx(change)
    assert out["baseline"]["step_noise_pct"] == pytest.approx(noise)
    code, out = check(db, "qwen2_infer", "--baseline", "small_kernels_eager", "--rule", "latency_ns>+2%",
                      "--rule", "kernels>+0")  # counts get no step band: +kernels fails
    assert code == (1 if out["headline"][0]["delta"] > 0 else 0)

    w4, w5 = facts["vm_534.step1"]["latency"], facts["vm_535.step1"]["latency"]
    code, out = check(db, "vm_534.step1", "--baseline", "vm_535.step1", "--rule", "latency_ns>+1%")
    assert pct(w5, w4) > 1
    assert code == 1 and out["rules"][0]["change"] == pytest.approx(pct(w5, w4))


def test_repeated_traces_give_the_noise_band(db, facts):
    """Two tb_ddp workers as repeated baseline runs: their spread is the band; the median is the value."""
    w4, w5 = facts["vm_534.step1"]["latency"], facts["vm_535.step1"]["latency"]
    med = (w4 + w5) / 2
    code, out = check(db, "vm_534.step1", "--baseline", "vm_535.step1", "--baseline", "vm_534.step1",
                      "--rule", "latency_ns>+1%")
    (v,) = out["rules"]
    assert code == 0 and v["status"] == "inside_noise"
    assert v["noise_pct"] == pytest.approx(100.0 * abs(w4 - w5) / med)
    assert v["change"] == pytest.approx(pct(round(med), w4))


def test_level_rule_baseline_file_and_markdown(db, facts, tmp_path):
    share = facts["llama_prefill_b8"]["host_wait_share"]
    base = tmp_path / "base.json"
    res = CliRunner().invoke(cli, ["check", "llama_prefill_b1", "--save-baseline", str(base), "--db", db])
    assert res.exit_code == 0, res.output
    saved = json.loads(base.read_text())
    assert saved["traces"][0]["headline"]["latency_ns"] == facts["llama_prefill_b1"]["latency"]
    md = tmp_path / "check.md"
    lo, hi = f"{share - 0.01:.4f}", f"{share + 0.01:.4f}"
    code, out = check(db, "llama_prefill_b8", "--baseline-file", str(base), "--rule", f"host_wait_share>{lo}",
                      "--rule", f"host_wait_share>{hi}", "--rule", "latency_ns>+5%", "--markdown", str(md))
    assert code == 1 and [v["status"] for v in out["rules"]] == ["fail", "pass", "pass"]
    assert out["rules"][0]["value"] == pytest.approx(share)
    text = md.read_text()
    assert text.startswith("### kernelscope check: FAILED") and f"`host_wait_share>{lo}` | ❌ fail" in text
    assert "| latency_ns | " + f"{facts['llama_prefill_b1']['latency']:,}" in text
    # the same answer from the stored traces as from the file
    code2, out2 = check(db, "llama_prefill_b8", "--baseline", "llama_prefill_b1", "--rule", "latency_ns>+5%")
    assert out2["headline"] == out["headline"]


@pytest.mark.parametrize("args, said", [
    (["train_step", "--baseline", "train_step", "--rule", "latency>+5%"], "unknown metric"),
    (["train_step", "--baseline", "train_step", "--rule", "host_wait_share>+5%"], "share"),
    (["train_step", "--rule", "latency_ns>+5%"], "give one baseline"),
    (["train_step", "--baseline-sweep", "llama_prefill", "--rule", "latency_ns>+5%"], "--sweep NEW"),
    (["train_step", "--baseline", "train_step"], "--rule"),
    (["train_step", "--baseline-file", "/nonexistent.json", "--rule", "latency_ns>+5%"], "cannot read"),
])
def test_bad_usage_is_one_line(db, args, said):
    res = CliRunner().invoke(cli, ["check", *args, "--db", db])
    assert res.exit_code == UsageError.exit_code and said in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.output


def test_sweep_against_a_baseline_sweep_point_by_point(db):
    """--sweep NEW --baseline-sweep OLD: points paired by batch as `diff --sweeps` pairs them; each point's
    verdict follows its own latency change (read from summary), the unpaired points named in a warning."""
    with open_store(db, read_only=True) as store:
        df = list_traces(store)
        lat = {}
        for t, lab in zip(df["trace_id"], df["labels"]):
            if lab.get("sweep") in ("llama_prefill", "qwen2_sweep"):
                lat[(lab["sweep"], int(lab["batch"]))] = get_analysis("summary").fn(store, t).scalars["latency_ns"]
    common = sorted({b for s_, b in lat if s_ == "llama_prefill"} & {b for s_, b in lat if s_ == "qwen2_sweep"})
    assert common == [1, 2, 4, 8, 16, 32]
    res = CliRunner().invoke(cli, ["check", "--sweep", "qwen2_sweep", "--baseline-sweep", "llama_prefill",
                                   "--rule", "latency_ns>+5%", "--db", db, "--json"])
    out = json.loads(res.stdout)
    want = {b: "fail" if pct(lat[("llama_prefill", b)], lat[("qwen2_sweep", b)]) > 5 else "pass" for b in common}
    assert {v["label"]: v["status"] for v in out["rules"]} == want
    assert res.exit_code == (1 if "fail" in want.values() else 0) and "64, 128" in res.stderr
    assert [(r["label"], r["a"], r["b"]) for r in out["headline"] if r["metric"] == "latency_ns"] == \
        [(b, lat[("llama_prefill", b)], lat[("qwen2_sweep", b)]) for b in common]
