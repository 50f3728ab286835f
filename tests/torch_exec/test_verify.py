"""``poetc verify``: exit 0 on a good schedule, 1 when gradients differ or the peak is
over budget, 2 (one line) on bad input or a schedule for another graph."""

from __future__ import annotations

import json

import pytest

from poet_compiler.cli import main
from poet_compiler.torch_exec import executor
from tests.torch_exec.test_executor import BATCH, compiled


@pytest.fixture(scope="module")
def schedule(tmp_path_factory):
    c = compiled("kws_dscnn", "30%", "paging")  # a schedule that pages, so the page file is used
    c.batch = BATCH
    path, _ = c.save(tmp_path_factory.mktemp("verify") / "kws.poet")
    return path


@pytest.mark.smoke
def test_verify_ok(schedule, tmp_path, capsys) -> None:
    pages = tmp_path / "flash.bin"
    assert main(["verify", "kws_dscnn", "--schedule", str(schedule), "--page-file", str(pages)]) == 0
    out = capsys.readouterr().out
    assert "bitwise identical" in out and out.strip().endswith("OK")
    assert pages.stat().st_size > 0
    assert main(["verify", "kws_dscnn", "--schedule", str(schedule), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] and rep["grads_bitwise"] and rep["max_abs_grad_diff"] == 0.0
    assert rep["paging_matches"] and rep["page_out_bytes"] > 0
    assert rep["measured_peak_bytes"] <= rep["ram_budget_bytes"]
    assert rep["measured_peak_bytes"] == rep["simulated_peak_bytes"]


def test_verify_fails_over_budget(schedule, tmp_path, capsys) -> None:
    poet = tmp_path / "tight.poet"
    poet.write_bytes(schedule.read_bytes())
    side = json.loads(schedule.with_suffix(".json").read_text())
    side["ram_budget_bytes"] = 1000
    poet.with_suffix(".json").write_text(json.dumps(side))
    assert main(["verify", "kws_dscnn", "--schedule", str(poet)]) == 1
    assert "FAIL: measured peak exceeds the budget" in capsys.readouterr().out


def test_verify_fails_when_gradients_differ(schedule, monkeypatch, capsys) -> None:
    original = executor.ScheduledStep.run_full

    def perturbed(self, *a, **k):
        loss, grads, upd = original(self, *a, **k)
        name = next(iter(grads))
        grads[name] = grads[name] + 1e-6
        return loss, grads, upd

    monkeypatch.setattr(executor.ScheduledStep, "run_full", perturbed)
    assert main(["verify", "kws_dscnn", "--schedule", str(schedule)]) == 1
    assert "FAIL: gradients differ" in capsys.readouterr().out


def _perturb(monkeypatch, what: str) -> None:
    """Make the scheduled step differ from autograd in ``what`` only."""
    original = executor.ScheduledStep.run_full

    def perturbed(self, *a, **k):
        loss, grads, upd = original(self, *a, **k)
        if what == "loss":
            loss = loss + 1e-6
        elif what == "buffers":
            name = next(n for n in upd if "running_mean" in n)
            upd = {**upd, name: upd[name] + 1e-6}
        elif what == "paging":
            self.last.page_in_bytes += 4  # a page-in the schedule does not have
        return loss, grads, upd

    monkeypatch.setattr(executor.ScheduledStep, "run_full", perturbed)


@pytest.mark.parametrize(("what", "says"), [("loss", "loss differs from autograd"),
                                            ("buffers", "buffer updates differ from autograd"),
                                            ("paging", "page file traffic differs from the schedule's paging volume")])
def test_verify_fails_on_loss_buffers_or_paging(schedule, monkeypatch, capsys, what: str, says: str) -> None:
    """Each mismatch alone fails verify (exit 1), in the text and in --json."""
    _perturb(monkeypatch, what)
    assert main(["verify", "kws_dscnn", "--schedule", str(schedule)]) == 1
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == f"FAIL: {says}", out
    assert main(["verify", "kws_dscnn", "--schedule", str(schedule), "--json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] is False and rep["grads_bitwise"] and rep["within_budget"]


@pytest.mark.smoke
def test_verify_bad_input(schedule, tmp_path, capsys) -> None:
    assert main(["verify", "mlp", "--schedule", str(schedule)]) == 2
    assert "75-node graph but mlp" in capsys.readouterr().err
    assert main(["verify", "kws_dscnn", "--schedule", str(schedule), "--batch", "4"]) == 2
    assert "another graph" in capsys.readouterr().err
    junk = tmp_path / "junk.poet"
    junk.write_bytes(b"not a schedule")
    assert main(["verify", "kws_dscnn", "--schedule", str(junk)]) == 2
    assert main(["verify", "kws_dscnn", "--schedule", str(tmp_path / "missing.poet")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 2 and "Traceback" not in err


def test_module_paging_traffic_is_the_distinct_storage_moved() -> None:
    """A coarsened batch-norm group holds its saved statistics once, while the graph counts
    them twice: the page file must see the distinct storage, and verify accepts exactly that."""
    from poet_compiler.torch_exec.verification import verify
    from tests.torch_exec.test_executor import traced

    c = compiled("kws_dscnn", "30%", "paging", "module")
    res = verify(traced("kws_dscnn", "module"), c.program, c.costs, ram_budget_bytes=c.problem.ram_budget_bytes)
    assert res.ok, res.failures
    assert res.page_out_bytes == res.expected_page_out_bytes < res.schedule_page_out_bytes
    assert res.page_in_bytes == res.expected_page_in_bytes > 0
