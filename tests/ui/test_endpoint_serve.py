"""The README's command for a class measuring its own server, `panel serve app.py --args
--endpoint URL --model M`, as written, with our own `python -m engine serve` as the endpoint (a
class would name its vLLM or SGLang server): lesson 2 offers the endpoint beside the built-in
engine, runs its load test over HTTP, and labels the figures with the endpoint's model and host."""

from __future__ import annotations

import re

from helpers import seed_machine_setup
from playwright.sync_api import expect
from ui_helpers import LONG, page_text, served_app, skip_prediction

from engine.lab.endpoint import Endpoint


def test_lesson_2_measures_the_teachers_endpoint(page, console, tmp_path_factory, server,
                                                  machine_setup):
    label = Endpoint(server["url"], server["model"]).label  # "tiny at 127.0.0.1:PORT"
    cache = seed_machine_setup(machine_setup, tmp_path_factory.mktemp("cache"))
    with served_app(tmp_path_factory, "--args", "--endpoint", server["url"],
                    "--model", server["model"], cache=cache) as url:
        page.goto(f"{url}/app?lesson=average-lies&source=endpoint&requests=10&rate=30"
                  "&long_share=0")
        skip_prediction(page)
        expect(page.get_by_text("Percentiles over 10 requests (ms)")).to_be_visible(
            timeout=LONG)
        expect(page.get_by_text(f"Measured over HTTP: {label}").first).to_be_visible()
        expect(page.get_by_role("button", name="Built-in engine")).to_be_visible()
        expect(page.get_by_role("button", name=label)).to_be_visible()
        text = page_text(page)
        assert re.search(r"not\s+visible\s+from\s+the\s+client", text)
        assert "Traceback" not in text
        assert console.errors == []
