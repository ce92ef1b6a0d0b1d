"""The teacher's key: where it comes from, how it is compared, and the class run's JSON routes
refusing (403, logged) without it. The routes' answers with the key, against the real engine
service, are in test_class_routes.py."""

from __future__ import annotations

import json
import logging

import pytest
from tornado.testing import AsyncHTTPTestCase
from tornado.web import Application

from lessons.classroom import teacher_key
from lessons.shell import routes


@pytest.fixture
def fresh_key(monkeypatch):
    monkeypatch.delenv(teacher_key.ENV, raising=False)
    teacher_key.forget_key()
    yield
    teacher_key.forget_key()


def test_key_from_the_environment(fresh_key, monkeypatch, capsys):
    monkeypatch.setenv(teacher_key.ENV, "chalk-and-talk")
    assert teacher_key.teacher_key() == "chalk-and-talk"
    assert teacher_key.key_ok("chalk-and-talk")
    assert "Teacher key" not in capsys.readouterr().err  # the teacher chose it: nothing printed


def test_generated_key_is_printed_once(fresh_key, capsys):
    key = teacher_key.teacher_key()
    assert len(key) >= 12
    assert teacher_key.teacher_key() == key
    err = capsys.readouterr().err
    assert err.count(f"Teacher key: {key}") == 1


def test_only_the_key_is_accepted(fresh_key, monkeypatch):
    monkeypatch.setenv(teacher_key.ENV, "s3cret")
    assert teacher_key.key_ok("s3cret")
    assert teacher_key.key_ok(" s3cret ")  # pasted with a space
    for wrong in (None, "", "s3cre", "s3cret!", "S3CRET"):
        assert not teacher_key.key_ok(wrong), wrong


class RefusedWithoutKey(AsyncHTTPTestCase):
    """The routes as `python app.py` and `panel serve --plugins` register them. No service is
    needed to refuse; one that is asked anything fails the test."""

    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(f"the service was asked for {name} without the key")

    def get_app(self):
        return Application([(p, h, {"service": self.Untouchable()})
                            for p, h, _ in routes.CLASS_ROUTES])

    def setUp(self):
        super().setUp()
        teacher_key.forget_key()
        self._env = pytest.MonkeyPatch()
        self._env.setenv(teacher_key.ENV, "right-key")

    def tearDown(self):
        self._env.undo()
        teacher_key.forget_key()
        super().tearDown()

    def post(self, path, headers=None, body="{}"):
        return self.fetch(path, method="POST", body=body, headers=headers or {})

    def test_refused_with_403_a_reason_and_a_log_line(self):
        for path in ("/class/knobs", "/class/start", "/class/stop"):
            for headers in ({}, {"X-Teacher-Key": "wrong-key"},
                            {"Cookie": f"{teacher_key.COOKIE}=wrong-key"}):
                with self.assertLogs("lessons.classroom.teacher_key", logging.WARNING) as logs:
                    response = self.post(path, headers, body='{"policy": "static"}')
                assert response.code == 403, (path, headers)
                answer = json.loads(response.body)
                assert answer["ok"] is False and "teacher's key" in answer["reason"]
                assert any(f"POST {path} refused" in line for line in logs.output)
                assert "wrong-key" not in " ".join(logs.output)  # the guess is not logged

    def test_the_not_found_catch_all_leaves_the_class_routes(self):
        import re
        catch_all = re.compile(routes.ROUTES[-1][0] + "$")
        for path in ("/class/knobs", "/class/start", "/class/stop", "/engine-status"):
            assert not catch_all.match(path), path
        assert catch_all.match("/class/nonsense")
