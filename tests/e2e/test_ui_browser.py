"""The web view (`/ui`) and `/docs` in a real headless browser: Debian's
Chromium driven by Selenium, against a real three-zone tree (root over cells
dfw and ord). The page must render the tree with its capacity bars (checked
on a screenshot, by colour), the last decisions, and load nothing from
anywhere but the zone itself."""

from __future__ import annotations

import base64
import io
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from strato.process import ServerProcess
from tests.e2e.test_zone_split import cells  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
GREEN = (0x2E, 0x9E, 0x47)  # .fill.low in api/routes/ui.py
SHOTS = os.environ.get("STRATO_UI_SCREENSHOT")  # a path: keep the page's screenshot


@pytest.fixture
def browser() -> Iterator[Any]:
    if not (CHROMIUM and DRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (make test installs them "
                    "as root: apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1600",
              "--disable-dev-shm-usage", "--force-device-scale-factor=1"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _login(driver: Any, token: str) -> None:
    """What a browser sends once its user typed the token at the Basic prompt."""
    basic = base64.b64encode(f"operator:{token}".encode()).decode()
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders",
                           {"headers": {"Authorization": f"Basic {basic}"}})


def _resources(driver: Any) -> list[str]:
    names: list[str] = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    return names


def _schedule(url: str, vcpu: int, n: int = 1) -> int:
    r = httpx.post(f"{url}/strato/v1/schedule", headers={"x-auth-token": "admin"}, timeout=30,
                   json={"consumers": [str(uuid.uuid4()) for _ in range(n)],
                         "project_id": "p", "user_id": "u",
                         "groups": [{"resources": {"VCPU": vcpu}}]})
    return r.status_code


def test_the_web_view_in_a_browser(cells: dict[str, ServerProcess],  # noqa: F811
                                   browser: Any) -> None:
    from PIL import Image
    from selenium.webdriver.common.by import By

    root = cells["root"].url
    assert _schedule(root, 8, 5) == 200          # five whole hosts of eight
    assert _schedule(root, 64) == 409            # no host that big: a refusal with its why
    with httpx.Client(headers={"x-auth-token": "admin"}) as c:  # summaries with the use
        c.get(f"{root}/strato/v1/summary?fresh=true").raise_for_status()

    r = httpx.get(f"{root}/ui")
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic ")
    _login(browser, "admin")
    browser.get(f"{root}/ui?refresh=0")
    assert browser.find_element(By.ID, "zone").text == "root"
    zones = {e.get_attribute("data-zone") for e in
             browser.find_elements(By.CSS_SELECTOR, "li.zone")}
    assert {"root", "dfw", "ord"} <= zones, zones
    for name in ("dfw", "ord"):
        node = browser.find_element(By.CSS_SELECTOR, f'li.zone[data-zone="{name}"]')
        assert "healthy" in node.find_element(By.CSS_SELECTOR, ".node").text
        meter = node.find_element(By.CSS_SELECTOR, '.bar[aria-label="VCPU used"]')
        assert meter.get_attribute("aria-valuemax") == "32"
    rows = browser.find_elements(By.CSS_SELECTOR, "#recent tbody tr")
    assert [r.get_attribute("class") for r in rows] == ["no_valid_placement", "placed"]
    assert "placed 5" in rows[1].text
    rows[0].find_element(By.TAG_NAME, "summary").click()
    assert "dfw" in rows[0].find_element(By.TAG_NAME, "details").text
    assert all(u.startswith(root) for u in _resources(browser)), _resources(browser)

    # The screenshot: the bars are drawn (a filled part in the colour of its
    # level, of the width of the share used), not just present in the markup.
    node = browser.find_element(By.CSS_SELECTOR, 'li.zone[data-zone="root"]')
    bar = node.find_element(By.CSS_SELECTOR, ".bar")
    fill = bar.find_element(By.CSS_SELECTOR, ".fill")
    share = int(bar.get_attribute("aria-valuenow")) / int(bar.get_attribute("aria-valuemax"))
    assert 0.5 < share < 0.7  # 40 of 64 VCPU: under 0.7, so green
    img = Image.open(io.BytesIO(bar.screenshot_as_png)).convert("RGB")
    w, h = img.size
    row = [img.getpixel((x, h // 2)) for x in range(w)]
    green = [x for x, px in enumerate(row)
             if all(abs(a - b) < 24 for a, b in zip(px, GREEN, strict=True))]
    assert green, "no filled part drawn"
    assert abs(len(green) / w - share) < 0.08, (len(green), w, share)
    assert fill.size["width"] > 0
    page = Image.open(io.BytesIO(browser.get_screenshot_as_png()))
    assert page.size[0] >= 1000
    if SHOTS:
        page.save(SHOTS)

    # /docs: Swagger UI from the zone's own files, rendering Strato's API.
    browser.get(f"{root}/docs")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        titles = browser.find_elements(By.CSS_SELECTOR, ".swagger-ui .info .title")
        if titles and "Strato" in titles[0].text:
            break
        time.sleep(0.2)
    else:
        pytest.fail("Swagger UI did not render the API: " + browser.page_source[:500])
    assert all(u.startswith(root) for u in _resources(browser)), _resources(browser)
