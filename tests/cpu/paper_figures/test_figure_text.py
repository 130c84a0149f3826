"""Figures a researcher could put in a paper: every figure drawn from the fixtures (and from a
committed run with repeats) has no text outside the figure and no two texts on top of each other
(their drawn bounding boxes), no change label on a bar, the GPU and its L2 in the title, the
run's final name at its foot, S as 128K, min..max bars where the run has repeats; the CLI refuses
a run of another arch and a full disk in one line."""
from __future__ import annotations

import errno
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from paper_figures import FIGURES, Skip, load_rows  # noqa: E402
from paper_figures.cli import run_cli  # noqa: E402
from paper_figures.drawing import finish, runs_drawn  # noqa: E402
from spec import get_arch  # noqa: E402
from tests.conftest import ROOT
from tests.cpu.paper_figures.figure_helpers import FIX

SOURCES = {   # runs -> the arch they are drawn for
    "h200-l1l2": "h200", "h200-traffic": "h200", "h200-divergence": "h200",
    "h200-sawtooth": "h200", "sim-active-sms": "gb10", "sim-reuse": "gb10", "ladder": "h200",
    "scaling": "h200", "h100-drift": "h100", "h100-longseq": "h100", "h100-misscost": "h100",
    "h100-repeats": "h100",
    "profiles/h100/sawtooth-20261123": "h100",     # committed, measured with 5 repeats: lo..hi
}


def _runs(name: str) -> list[Path]:
    base = ROOT / name if "/" in name else FIX / name
    subs = sorted(p for p in base.iterdir() if p.is_dir())
    return subs or [base]


def _drawn(fig):
    """(text, bounding box) of every text the figure draws (tick labels outside the view are
    made but not drawn: recording the draw calls sees what a reader sees)."""
    out = []
    original = Text.draw

    def draw(self, renderer):
        original(self, renderer)
        if self.get_visible() and self.get_text().strip():
            out.append((self, self.get_window_extent(renderer)))

    Text.draw = draw
    try:
        fig.canvas.draw()
    finally:
        Text.draw = original
    return out


def _figures():
    for name, arch in SOURCES.items():
        rows = load_rows(_runs(name))
        for mod in FIGURES:
            try:
                data = mod.load(rows)
            except Skip:
                continue
            yield name, arch, rows, mod, data


CASES = [(n, m.FIGURE) for n, _, _, m, _ in _figures()]


@pytest.mark.parametrize("name, figure", CASES)
def test_no_text_leaves_the_figure_or_covers_another(name, figure):
    arch = SOURCES[name]
    rows = load_rows(_runs(name))
    mod = next(m for m in FIGURES if m.FIGURE == figure)
    fig = mod.plot(mod.load(rows), arch)
    finish(fig, rows, figure, arch, runs_drawn(rows, figure))
    texts = _drawn(fig)
    box = fig.bbox
    for t, b in texts:
        assert (b.x0 >= box.x0 - 1 and b.y0 >= box.y0 - 1 and b.x1 <= box.x1 + 1
                and b.y1 <= box.y1 + 1), f"outside the figure: {t.get_text()[:60]!r}"
    for i, (t, a) in enumerate(texts):
        for u, b in texts[i + 1:]:
            w = min(a.x1, b.x1) - max(a.x0, b.x0)
            h = min(a.y1, b.y1) - max(a.y0, b.y0)
            assert w <= 1 or h <= 1, f"{t.get_text()[:40]!r} covers {u.get_text()[:40]!r}"
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:             # a change label sits above its bars, never on one
        bars = [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, Rectangle)]
        for t in ax.texts:
            if t.get_gid() != "change":
                continue
            a = t.get_window_extent(renderer)
            for b in bars:
                w = min(a.x1, b.x1) - max(a.x0, b.x0)
                h = min(a.y1, b.y1) - max(a.y0, b.y0)
                assert w <= 0.5 or h <= 0.5, f"{t.get_text()} on a bar"
    plt.close(fig)


def _title(fig) -> str:
    sup = getattr(fig, "_suptitle", None)
    return " ".join((sup.get_text() if sup is not None and sup.get_text()
                     else fig.axes[0].get_title()).split())


def test_titles_name_the_gpu_its_l2_and_the_simulated_capacity():
    rows = load_rows([FIX / "sim-active-sms"])
    from paper_figures import f06_active_sms
    fig = f06_active_sms.plot(f06_active_sms.load(rows), "gb10")
    finish(fig, rows, "F6", "gb10", runs_drawn(rows, "F6"))
    title = _title(fig)
    assert "NVIDIA GB10" in title and "(gb10), L2 24 MiB" in title and "simulated" in title
    plt.close(fig)
    rows = load_rows([FIX / "h200-sawtooth"])
    from paper_figures import f08_cuda_batch
    fig = f08_cuda_batch.plot(f08_cuda_batch.load(rows), "h200")
    finish(fig, rows, "F8a", "h200", runs_drawn(rows, "F8a"))
    h200 = get_arch("h200")
    assert f"(h200), L2 {h200.l2_bytes / 2**20:g} MiB" in _title(fig)
    assert "S=320K" in _title(fig)                        # 327680 tokens, as the paper writes S
    plt.close(fig)


def test_miss_bars_show_the_spread_of_the_repeats():
    from paper_figures import f08_cuda_batch
    rows = load_rows([ROOT / "profiles/h100/sawtooth-20261123"])
    data = f08_cuda_batch.load(rows)
    fig = f08_cuda_batch.plot(data, "h100")
    ax = fig.axes[0]                                       # the run; [1]: the paper's panel
    bars = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(bars) == 2                                  # linear and sawtooth
    want = sorted(r["hi"] / 1e6 for r in rows if r["metric"] ==
                  "lts__t_sectors_srcunit_tex_lookup_miss.sum" and r["backend"] == "cuda")
    tops = sorted(float(seg[1][1]) for c in bars for seg in c.lines[2][0].get_segments())
    assert tops == pytest.approx(want)
    assert "min..max of the repeats" in ax.get_ylabel()
    plt.close(fig)
    sim = f08_cuda_batch.load(load_rows([FIX / "h200-sawtooth"]))
    assert not sim["errors"]                               # no repeats: no bars


def test_figures_of_a_run_being_written_carry_its_final_name(tmp_path, monkeypatch):
    """``experiments.run`` draws from the hidden partial directory; the figures name the run."""
    import shutil

    from matplotlib.figure import Figure

    from paper_figures.drawing import render
    partial = tmp_path / ".20261126-sawtooth.partial"
    shutil.copytree(FIX / "h200-sawtooth", partial)
    seen = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: seen.append(
        " ".join(t.get_text() for t in self.findobj(Text))))
    report = render(load_rows([partial]), "h200", tmp_path / "figs", FIGURES[:12],
                    names={str(partial): "20261126-sawtooth"})
    drawn = [r for r in report if "files" in r and r["runs"]]
    assert drawn and all(r["runs"] == ["20261126-sawtooth"] for r in drawn)
    assert seen and all(".partial" not in s for s in seen)
    assert any("data: 20261126-sawtooth" in s for s in seen)


def test_figures_of_another_arch_are_refused_in_one_line(tmp_path, capsys):
    rc = run_cli(["--arch", "gb10", "--run", str(FIX / "h200-sawtooth"), "--out",
                  str(tmp_path / "o")], FIGURES)
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "holds h200 data, not gb10: pass --arch h200" in err
    assert not (tmp_path / "o").exists()


def test_a_run_is_named_by_its_directory_or_its_manifest_and_absent_studies_are_one_line(
        tmp_path, capsys):
    rc = run_cli(["--arch", "h100", "--run", str(FIX / "h100-longseq" / "manifest.json"),
                  "--out", str(tmp_path / "o")], FIGURES)
    out = capsys.readouterr().out
    assert rc == 0 and "longseq: longseq.png" in out
    assert "skipped" not in out
    (line,) = [x for x in out.splitlines() if "figures not drawn" in x]
    assert "--verbose" in line and "divergence" in line


def test_a_full_disk_while_figures_are_written_is_one_line(tmp_path, monkeypatch, capsys):
    from matplotlib.figure import Figure

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(a[0]))

    monkeypatch.setattr(Figure, "savefig", full)
    rc = run_cli(["--arch", "h200", "--run", str(FIX / "ladder"), "--out",
                  str(tmp_path / "o")], FIGURES)
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "no space left" in err
    assert not any(tmp_path.iterdir())


def _foot(fig) -> str:
    return " ".join(next(t.get_text() for t in fig.texts if t.get_gid() == "footer").split())


@pytest.mark.parametrize("figure, setting", [("F8a", "non-causal"), ("F9a", "non-causal"),
                                             ("F10a", "causal")])
def test_each_figure_notes_its_own_rows(figure, setting):
    """The foot of a figure drawn from simulated rows is written for the rows it drew (its
    module's ``ROWS``, as ``render`` passes them): it names their causal setting and never the
    other one, and holds no prose shared word by word across notes. The title explains a
    simulated L2 below the arch's (the L2 a spilling build's stacks hold)."""
    rows = load_rows([ROOT / "profiles/gb10/sawtooth-20261128b"])
    mod = next(m for m in FIGURES if m.FIGURE == figure)
    fig = mod.plot(mod.load(rows), "gb10")
    finish(fig, rows, figure, "gb10", runs_drawn(rows, figure), None, mod.ROWS)
    foot = _foot(fig)
    assert f"simulated: {setting} rows: timesim model=" in foot, foot
    other = "causal" if setting == "non-causal" else "non-causal"
    assert f" {other} " not in foot.replace(f"{setting} rows", "") and "H100" not in foot, foot
    assert "params gb10: f=1 r=1 (defaults, not fitted)" in foot
    title = _title(fig)
    if figure == "F10a":
        assert "21.98 MiB usable of 24 MiB (2.0 MiB holds a build's spilled stacks)" in title
    else:
        assert "usable" not in title and "simulated L2 24 MiB" in title, title
    plt.close(fig)
