#!/usr/bin/env python3
"""A check of receiver.py, run by hand with the venv's Python:

    .tools/notify-venv/bin/python tests/notify/check_receiver.py

Signs a body with the same reference library (`standardwebhooks`) and confirms that the
receiver verifies it and refuses a tampered body, a wrong secret and a stale timestamp; that
its ntfy and Slack shape checks accept the planned payloads and refuse broken ones; and that
scripted failures and /dead/ answer as documented. Exits 0 when every check holds.
"""

import base64
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

from standardwebhooks import Webhook

HERE = os.path.dirname(os.path.abspath(__file__))
SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
OTHER = "whsec_" + base64.b64encode(b"another secret, of 32 bytes ok!!").decode()


def post(port, path, body, headers=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST")
    req.add_header("content-type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def signed(secret, msg_id, body, when=None):
    when = when or datetime.now(tz=timezone.utc)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, when, body),
    }


def main():
    failures = []

    def check(what, cond, detail=""):
        print(("ok   " if cond else "FAIL ") + what + (f": {detail}" if not cond and detail else ""))
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "receiver.py"), "--log", log, "--secret", SECRET,
             "--fail", "flaky=2", "--fail", "flakyslack=1"],
            stdout=subprocess.PIPE, text=True,
        )
        try:
            port = json.loads(proc.stdout.readline())["port"]
            body = json.dumps({"schema_version": 1, "type": "task.finished", "data": {"task_id": "agt_x"}}).encode()

            # The library round trip, without the server.
            h = signed(SECRET, "msg_0123456789abcdefghijklmnop", body)
            check("the library verifies its own signature", Webhook(SECRET).verify(body, h)["type"] == "task.finished")
            try:
                Webhook(SECRET).verify(body.replace(b"finished", b"failed!!"), h)
                check("the library refuses a tampered body", False)
            except Exception:
                check("the library refuses a tampered body", True)

            # Through the receiver.
            s, _ = post(port, "/webhook/hook", body, h)
            check("a signed body is accepted (200)", s == 200, s)
            s, _ = post(port, "/webhook/hook", body.replace(b"agt_x", b"agt_y"), h)
            check("a tampered body is refused (401)", s == 401, s)
            s, _ = post(port, "/webhook/hook", body, signed(OTHER, "msg_a", body))
            check("another secret's signature is refused (401)", s == 401, s)
            old = datetime.now(tz=timezone.utc) - timedelta(minutes=10)
            s, _ = post(port, "/webhook/hook", body, signed(SECRET, "msg_b", body, old))
            check("a ten-minute-old timestamp is refused (401)", s == 401, s)
            s, _ = post(port, "/webhook/hook", body)
            check("no signature headers is refused (401)", s == 401, s)
            flaky = [post(port, "/webhook/flaky", body, signed(SECRET, "msg_c", body))[0] for _ in range(3)]
            check("--fail flaky=2: 500, 500, then 200", flaky == [500, 500, 200], flaky)
            s, _ = post(port, "/dead/anything", body)
            check("/dead/ answers 503", s == 503, s)
            s, _ = post(port, "/elsewhere", body)
            check("an unknown path answers 404", s == 404, s)

            ntfy = {
                "topic": "mytopic", "title": "Approval requested", "message": "Run `make test`", "priority": 4,
                "tags": ["warning"], "click": "http://127.0.0.1:8080/tasks/agt_x",
                "actions": [{"action": "view", "label": "Open", "url": "http://127.0.0.1:8080/a/tok"}],
            }
            s, a = post(port, "/ntfy/", json.dumps(ntfy).encode(), {"authorization": "Bearer tk_x"})
            check("the planned ntfy body is accepted", s == 200, f"{s} {a}")
            for what, bad in [
                ("an unknown field", {**ntfy, "schema_version": 1}),
                ("no topic", {k: v for k, v in ntfy.items() if k != "topic"}),
                ("priority 6", {**ntfy, "priority": 6}),
                ("priority as a string", {**ntfy, "priority": "4"}),
                ("tags not strings", {**ntfy, "tags": [1]}),
                ("click not a URL", {**ntfy, "click": "/tasks/x"}),
                ("an http action", {**ntfy, "actions": [{"action": "http", "label": "x", "url": "http://h/"}]}),
            ]:
                s, _ = post(port, "/ntfy/", json.dumps(bad).encode())
                check(f"ntfy refuses {what} (400)", s == 400, s)

            slack = {
                "text": "Approval requested: Run `make test`",
                "blocks": [
                    {"type": "header", "text": {"type": "plain_text", "text": "Approval requested"}},
                    {"type": "section", "text": {"type": "mrkdwn", "text": "*repo* · fake · agt_x"}},
                    {"type": "actions", "elements": [
                        {"type": "button", "text": {"type": "plain_text", "text": "Open"},
                         "url": "http://127.0.0.1:8080/a/tok"}]},
                ],
            }
            s, a = post(port, "/slack/chan", json.dumps(slack).encode())
            check("the planned Slack body is accepted with `ok`", (s, a) == (200, "ok"), f"{s} {a}")
            long_header = json.loads(json.dumps(slack))
            long_header["blocks"][0]["text"]["text"] = "x" * 151
            mrkdwn_header = json.loads(json.dumps(slack))
            mrkdwn_header["blocks"][0]["text"]["type"] = "mrkdwn"
            long_button = json.loads(json.dumps(slack))
            long_button["blocks"][2]["elements"][0]["text"]["text"] = "y" * 76
            for what, bad in [
                ("a 151-character header", long_header),
                ("a mrkdwn header", mrkdwn_header),
                ("a 76-character button", long_button),
                ("an unknown block type", {**slack, "blocks": [{"type": "video"}]}),
            ]:
                s, a = post(port, "/slack/chan", json.dumps(bad).encode())
                check(f"Slack refuses {what} (400 invalid_blocks)", (s, a) == (400, "invalid_blocks"), f"{s} {a}")
            s, a = post(port, "/slack/chan", json.dumps({"blocks": slack["blocks"]}).encode())
            check("Slack refuses no text (400 no_text)", (s, a) == (400, "no_text"), f"{s} {a}")
            flaky = [post(port, "/slack/flakyslack", json.dumps(slack).encode())[0] for _ in range(2)]
            check("--fail flakyslack=1: 500 then 200", flaky == [500, 200], flaky)

            with open(log, encoding="utf-8") as f:
                records = [json.loads(line) for line in f]
            first = records[0]
            check("the log has one line per request", len(records) == 26, len(records))
            check("a record has the documented keys",
                  {"path", "headers", "body", "verified", "error", "status_answered"} <= set(first), first)
            check("a verified record", first["verified"] is True and first["status_answered"] == 200, first)
            check("headers are lower-cased", "webhook-id" in first["headers"], first["headers"])
            check("the tampered one logged verified=false", records[1]["verified"] is False, records[1])
            check("ntfy records carry verified=null",
                  all(r["verified"] is None for r in records if r["path"] == "/ntfy/"))
        finally:
            proc.kill()
            proc.wait()

    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
