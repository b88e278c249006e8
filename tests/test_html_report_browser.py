"""The HTML report as a reader sees it: opened in headless Chromium (Debian's package; `.ci/run`
installs it), its per-episode table, figures and links checked in the rendered page."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from simuguard_gym.cli import main
from simuguard_gym.recording.reader import load_recording

pytest.importorskip("matplotlib")

BROWSER = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(name)), None)
#: Runs inside the page that frames the report: what the reader's browser made of it.
PROBE = """<!doctype html><html><body style="margin:0"><iframe id="report" src="report.html" width="1280" height="900"
style="border:0"></iframe>
<script>
document.getElementById("report").onload = function () {
  const d = this.contentDocument;
  const images = Array.from(d.images);
  const rows = Array.from(d.querySelectorAll("table.episodes tr.episode"));
  const heights = rows.map(r => r.getBoundingClientRect().height);
  const kinds = rows.map(r => r.classList.contains("flagged") ? 0 : r.classList.contains("failure") ? 1 : 2);
  const closed = rows[0].nextElementSibling.hidden;
  rows[0].click();  // a line opens its details and commands
  const detail = rows[0].nextElementSibling;
  const seeds = () => Array.from(d.querySelectorAll("table.episodes tr.episode")).map(r => r.cells[1].textContent);
  d.querySelectorAll("table.episodes th")[1].click();  // sorted by seed
  const sorted = seeds();
  const kind = d.getElementById("kind");
  kind.value = "flagged"; kind.dispatchEvent(new Event("change"));
  const result = {
    title: d.title,
    episodes: rows.length,
    table_top: d.querySelector("table.episodes").getBoundingClientRect().top,
    overflow: d.documentElement.scrollWidth - d.documentElement.clientWidth,
    tallest: Math.max(...heights), lowest: Math.min(...heights),
    flagged_first: kinds.every((k, i) => i === 0 || kinds[i - 1] <= k),
    details: closed && !detail.hidden ? detail.textContent : null,
    sorted_by_seed: sorted.every((s, i) => i === 0 || Number(sorted[i - 1]) <= Number(s)),
    shown_flagged: rows.filter(r => !r.hidden).length,
    images: images.length,
    broken: images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt),
    widths: images.map(i => i.getBoundingClientRect().width),
    hrefs: Array.from(d.querySelectorAll("a[href]")).map(a => a.getAttribute("href")),
    anchors: Array.from(d.querySelectorAll("[id]")).map(e => e.id),
  };
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
};
</script></body></html>"""


def _browser(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                           "--virtual-time-budget=15000", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if BROWSER is None:
        if os.environ.get("SIMUGUARD_REQUIRE_RENDERING") == "1":
            pytest.fail("no Chromium to open the report in (apt-get install chromium)")
        pytest.skip("no Chromium (apt-get install chromium)")
    out = tmp_path_factory.mktemp("run")
    assert main(["audit", "--env", "simuguard_gym/PlaceCanBasket-MuJoCo-v0", "--env-kwargs",
                 '{"pad_kp": 800, "pad_timeconst": 0.02}', "--episodes", "100", "--intervention", "timeconst=0.1",
                 "--quiet", "--no-videos", "--out", str(out)]) == 0
    return out


def test_the_report_renders_its_table_figures_and_links(run):
    (run / "probe.html").write_text(PROBE)
    shown = _browser("--dump-dom", (run / "probe.html").as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', shown.stdout, re.S)
    assert found, shown.stderr[-2000:]
    page = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))
    assert page["episodes"] == 100  # one line per episode
    # Read as a benchmark team reads it: the episode table within two screens of the top, one line
    # per episode, nothing wider than 1280 px, flagged episodes first, details and commands on a click.
    assert page["table_top"] < 2 * 900 and page["overflow"] <= 0
    assert page["tallest"] < 1.5 * page["lowest"] and page["flagged_first"] and page["sorted_by_seed"]
    assert "simuguard rerun" in page["details"] and "simuguard video" in page["details"]
    recordings = sorted(run.glob("*.msgpack"))
    flagged = sum(any(e["artifact"] for e in load_recording(p).footer["detector"]["events"]) for p in recordings)
    assert page["shown_flagged"] == flagged
    # the scores, the peak speeds where there are events, a plot per contact artifact (on mujoco
    # 4, seed 4 of this run holds one); each decoded and drawn wide
    events = [e for p in recordings for e in load_recording(p).footer["detector"]["events"]]
    artifacts = sum(bool(e["artifact"]) for e in events)
    assert page["images"] == 1 + bool(events) + artifacts
    assert page["broken"] == [] and min(page["widths"]) > 200
    assert ("#artifact_000" in page["hrefs"]) == (artifacts > 0) and "scores.svg" in page["hrefs"]
    for href in page["hrefs"]:
        if href.startswith("#"):
            assert href[1:] in page["anchors"], f"the link {href} goes nowhere"
        elif "://" not in href:
            assert (run / href).exists(), f"the link {href} names no file"


def test_a_screenshot_of_the_report_is_not_blank(run):
    from matplotlib.image import imread

    shot = run / "report.png"
    _browser("--window-size=1280,2400", f"--screenshot={shot}", (run / "report.html").as_uri())
    image = imread(shot)
    assert image.shape[:2] == (2400, 1280)
    ink = (image[..., :3].mean(axis=2) < 0.8).mean()  # share of pixels darker than the white page
    assert ink > 0.02, f"only {ink:.1%} of the page is drawn"
