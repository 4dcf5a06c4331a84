"""Access token of the dashboard (issue 11): `--host 0.0.0.0` served every trace and path to the network
with no warning and no authentication. Now binding beyond loopback prints a warning and requires a token
(generated when none is given); a request without it gets 401 and one sentence; the token is accepted as
``?token=`` once (a redirect sets a cookie), as the cookie, or as a header. Flask test client, plus the
real command for the warning and the printed URL."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from kernelscope.dashboard.app import TOKEN_COOKIE, create_app, is_loopback

TOKEN = "s3cret-Token_1234"


@pytest.fixture()
def client(dash_store):
    return create_app(dash_store.db, token=TOKEN).server.test_client()


def _page_post(client, headers=None):
    body = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
            "inputs": [{"id": "url", "property": "pathname", "value": "/"}],
            "changedPropIds": ["url.pathname"], "state": [{"id": "url", "property": "search", "value": ""}]}
    return client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json",
                       headers=headers or {})


def _refused(r):
    assert r.status_code == 401, r.status_code
    text = r.get_data(as_text=True)
    assert text.startswith("kernelscope: this dashboard needs its access token") and text.count("\n") == 1
    assert TOKEN not in text


def test_every_route_needs_the_token(client, dash_store):
    tid = dash_store.ids["train_step"]
    for path in ("/", f"/trace/{tid}/timeline", "/_dash-layout", "/_dash-dependencies",
                 f"/export/{tid}/perfetto.json", "/assets/nothing.css", "/_favicon.ico"):
        _refused(client.get(path))
    _refused(_page_post(client))
    _refused(client.get("/?token=wrong-token-123"))
    _refused(client.get("/", headers={"X-Kernelscope-Token": "wrong-token-123"}))
    _refused(client.get("/", headers={"Authorization": "Bearer nope-nope-nope"}))
    client.set_cookie(TOKEN_COOKIE, "wrong-token-123")
    _refused(client.get("/"))


def test_token_once_in_the_url_then_a_cookie(client, dash_store):
    tid = dash_store.ids["train_step"]
    r = client.get(f"/trace/{tid}/timeline?t0=1&token={TOKEN}&t1=2")
    assert r.status_code == 303
    assert r.headers["Location"].endswith(f"/trace/{tid}/timeline?t0=1&t1=2")  # the token leaves the URL
    cookie = r.headers["Set-Cookie"]
    assert f"{TOKEN_COOKIE}={TOKEN}" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    # the browser now carries the cookie: the page, its callbacks and the export answer
    assert client.get(f"/trace/{tid}/timeline?t0=1&t1=2").status_code == 200
    r = _page_post(client)
    assert r.status_code == 200 and "traces-table" in r.get_data(as_text=True)
    assert client.get(f"/export/{tid}/perfetto.json?t0=0&t1=1").status_code == 200


def test_redirect_stays_on_this_server(client):
    r = client.get(f"//evil.example/x?token={TOKEN}")
    assert r.status_code == 303
    assert r.headers["Location"].startswith("/") and not r.headers["Location"].startswith("//")


def test_token_as_a_header(client):
    assert client.get("/", headers={"X-Kernelscope-Token": TOKEN}).status_code == 200
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    r = _page_post(client, headers={"X-Kernelscope-Token": TOKEN})
    assert r.status_code == 200 and "traces-table" in r.get_data(as_text=True)


def test_no_token_means_open_on_loopback(dash_store):
    c = create_app(dash_store.db).server.test_client()
    assert c.get("/").status_code == 200


@pytest.mark.parametrize("host, loop", [("127.0.0.1", True), ("127.8.0.1", True), ("::1", True),
                                        ("localhost", True), ("0.0.0.0", False), ("::", False),
                                        ("192.168.1.5", False), ("myhost.example", False)])
def test_loopback(host, loop):
    assert is_loopback(host) is loop


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(db, *args):
    argv = [sys.executable, "-m", "kernelscope.cli", "dashboard", "--db", str(db), "--port", str(_free_port()),
            *args]
    env = {k: v for k, v in os.environ.items() if k != "KERNELSCOPE_DASHBOARD_TOKEN"}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _first_line(proc, stream, timeout=60):
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sel.select(timeout=1):
            return stream.readline()
        assert proc.poll() is None, proc.stderr.read()
    raise AssertionError("no output")


def _stop(proc):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_beyond_loopback_warns_and_prints_a_generated_token(dash_store):
    import urllib.error
    import urllib.request

    proc = _start(dash_store.db, "--host", "0.0.0.0")
    try:
        warning = _first_line(proc, proc.stderr)
        assert warning.startswith("kernelscope: warning: serving on 0.0.0.0, beyond this machine")
        url = _first_line(proc, proc.stdout).strip()
        m = re.fullmatch(r"kernelscope dashboard: http://0\.0\.0\.0:(\d+)/\?token=([A-Za-z0-9_-]{20,})", url)
        assert m, url
        port, token = m.groups()
        base = f"http://127.0.0.1:{port}/"
        for _ in range(100):  # the server binds right after printing
            try:
                urllib.request.urlopen(base, timeout=5)
            except urllib.error.HTTPError as exc:
                assert exc.code == 401
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError("the dashboard did not answer")
        req = urllib.request.Request(base, headers={"X-Kernelscope-Token": token})
        assert urllib.request.urlopen(req, timeout=10).status == 200
    finally:
        _stop(proc)


def test_a_given_token_is_used_and_a_bad_one_refused(dash_store):
    proc = _start(dash_store.db, "--token", TOKEN)
    try:
        assert _first_line(proc, proc.stdout).strip().endswith(f"/?token={TOKEN}")
    finally:
        _stop(proc)
    bad = subprocess.run([sys.executable, "-m", "kernelscope.cli", "dashboard", "--db", str(dash_store.db),
                          "--token", "short"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 6 and bad.stderr.strip().startswith("kernelscope: --token must be 8 to 256")
    assert len(bad.stderr.strip().splitlines()) == 1


def test_a_port_in_use_is_one_line_before_any_url(tmp_path):
    """A second `kernelscope dashboard` on a held port printed the URL (of the other server, maybe over another
    store) and then Dash's two-line failure; now one line, a usage exit code, and no URL."""
    from stores import empty

    db = empty(tmp_path / "s.duckdb")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "kernelscope", "dashboard", "--db", str(db), "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    from kernelscope.errors import UsageError

    assert proc.returncode == UsageError.exit_code and proc.stdout == "", (proc.returncode, proc.stdout)
    assert proc.stderr.strip().splitlines() == [
        f"kernelscope: cannot serve on 127.0.0.1:{port}: Address already in use (another kernelscope dashboard or "
        "server holds it?); stop it, or choose another port with --port"]
