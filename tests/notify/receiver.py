#!/usr/bin/env python3
"""A local receiver for the bridge's outbound notifications, for the end-to-end tests.

Serves HTTP on 127.0.0.1 (a port the kernel picks unless --port says otherwise), prints
`{"port": N}` as its first stdout line, then serves until killed. Every request is appended to
the --log file as one JSON line, written before the answer is sent (so a delivery the bridge
counts as done is already in the log):

    {"method", "path", "headers" (names lower-cased), "body" (text), "verified": true|false|null,
     "error": null|"why the request was refused", "status_answered", "received_at" (unix s)}

Routes:
  POST /webhook/<name>  Standard Webhooks: the signature is verified with the reference library
                        (`standardwebhooks`, pinned in requirements.txt) and --secret; a bad or
                        missing signature answers 401 (verified false), else 200.
  POST /ntfy/           an ntfy server root: the body must be the documented JSON publish shape
                        (https://docs.ntfy.sh/publish/#publish-as-json), else 400.
  POST /slack/<name>    a Slack incoming webhook: text fallback and Block Kit blocks checked;
                        answers 200 `ok`, or 400 `invalid_payload` / `no_text` / `invalid_blocks`.
  ANY  /dead/...        always 503.
  anything else         404 (logged too, so a test sees where a request went astray).

Scripted failures: `--fail NAME=N` (repeatable) makes the first N requests to /webhook/NAME or
/slack/NAME (`--fail ntfy=N`: to /ntfy/) that would have been accepted answer 500 instead; the
next ones are accepted. A request refused for its signature or shape does not count.
"""

import argparse
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from standardwebhooks import Webhook, WebhookVerificationError


# --- ntfy: https://docs.ntfy.sh/publish/#publish-as-json ---------------------------------------

NTFY_FIELDS = {
    "topic", "message", "title", "tags", "priority", "actions", "click", "attach", "markdown",
    "icon", "filename", "delay", "email", "call",
}
NTFY_TOPIC = re.compile(r"^[-_A-Za-z0-9]{1,64}$")
NTFY_VIEW_FIELDS = {"action", "label", "url", "clear"}


def is_http_url(value):
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def check_ntfy(doc):
    """None when `doc` is a valid ntfy JSON publish body, else why not."""
    if not isinstance(doc, dict):
        return "the body is not a JSON object"
    unknown = sorted(set(doc) - NTFY_FIELDS)
    if unknown:
        return f"unknown fields: {unknown}"
    topic = doc.get("topic")
    if not isinstance(topic, str) or not NTFY_TOPIC.match(topic):
        return f"topic must be a topic name (1..64 of A-Z a-z 0-9 _ -), got {topic!r}"
    for field in ("message", "title", "filename", "delay", "email", "call"):
        if field in doc and not isinstance(doc[field], str):
            return f"{field} must be a string"
    if "priority" in doc:
        p = doc["priority"]
        if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 5:
            return f"priority must be an integer 1..5, got {p!r}"
    if "tags" in doc:
        tags = doc["tags"]
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            return "tags must be a list of strings"
    for field in ("click", "attach", "icon"):
        if field in doc and not is_http_url(doc[field]):
            return f"{field} must be an http(s) URL, got {doc[field]!r}"
    if "markdown" in doc and not isinstance(doc["markdown"], bool):
        return "markdown must be a boolean"
    if "actions" in doc:
        actions = doc["actions"]
        if not isinstance(actions, list) or len(actions) > 3:
            return "actions must be a list of at most 3 actions"
        for action in actions:
            if not isinstance(action, dict) or action.get("action") != "view":
                return f"only view actions are expected, got {action!r}"
            unknown = sorted(set(action) - NTFY_VIEW_FIELDS)
            if unknown:
                return f"unknown view action fields: {unknown}"
            if not isinstance(action.get("label"), str) or not action["label"]:
                return "a view action needs a label"
            if not is_http_url(action.get("url")):
                return f"a view action needs an http(s) url, got {action.get('url')!r}"
            if "clear" in action and not isinstance(action["clear"], bool):
                return "clear must be a boolean"
    return None


# --- Slack: incoming webhooks with Block Kit ---------------------------------------------------

SLACK_FIELDS = {"text", "blocks", "attachments", "thread_ts", "mrkdwn", "unfurl_links", "unfurl_media"}


def check_text_object(obj, kinds, limit, where):
    if not isinstance(obj, dict) or obj.get("type") not in kinds:
        return f"{where}: a text object of type {'/'.join(sorted(kinds))} is required"
    allowed = {"type", "text", "emoji"} if obj["type"] == "plain_text" else {"type", "text", "verbatim"}
    unknown = sorted(set(obj) - allowed)
    if unknown:
        return f"{where}: unknown text object fields {unknown}"
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return f"{where}: text must be a non-empty string"
    if len(text) > limit:
        return f"{where}: text is {len(text)} characters, more than {limit}"
    return None


def check_block(block, i):
    where = f"blocks[{i}]"
    if not isinstance(block, dict):
        return f"{where} is not an object"
    kind = block.get("type")
    if "block_id" in block and (not isinstance(block["block_id"], str) or len(block["block_id"]) > 255):
        return f"{where}: block_id must be a string of at most 255 characters"
    if kind == "header":
        if set(block) - {"type", "text", "block_id"}:
            return f"{where}: unknown header fields"
        return check_text_object(block.get("text"), {"plain_text"}, 150, f"{where}.text")
    if kind == "section":
        if set(block) - {"type", "text", "block_id", "fields", "accessory"}:
            return f"{where}: unknown section fields"
        if "text" not in block and "fields" not in block:
            return f"{where}: a section needs text or fields"
        if "text" in block:
            err = check_text_object(block["text"], {"mrkdwn", "plain_text"}, 3000, f"{where}.text")
            if err:
                return err
        if "fields" in block:
            fields = block["fields"]
            if not isinstance(fields, list) or not 1 <= len(fields) <= 10:
                return f"{where}: fields must be 1..10 text objects"
            for j, f in enumerate(fields):
                err = check_text_object(f, {"mrkdwn", "plain_text"}, 2000, f"{where}.fields[{j}]")
                if err:
                    return err
        return None
    if kind == "actions":
        if set(block) - {"type", "elements", "block_id"}:
            return f"{where}: unknown actions fields"
        elements = block.get("elements")
        if not isinstance(elements, list) or not 1 <= len(elements) <= 25:
            return f"{where}: elements must be 1..25 buttons"
        for j, button in enumerate(elements):
            w = f"{where}.elements[{j}]"
            if not isinstance(button, dict) or button.get("type") != "button":
                return f"{w}: only buttons are expected"
            if set(button) - {"type", "text", "url", "action_id", "value", "style", "accessibility_label"}:
                return f"{w}: unknown button fields"
            err = check_text_object(button.get("text"), {"plain_text"}, 75, f"{w}.text")
            if err:
                return err
            url = button.get("url")
            if url is not None and (not is_http_url(url) or len(url) > 3000):
                return f"{w}: url must be an http(s) URL of at most 3000 characters"
            if "style" in button and button["style"] not in ("primary", "danger"):
                return f"{w}: style must be primary or danger"
            if "action_id" in button and (not isinstance(button["action_id"], str) or len(button["action_id"]) > 255):
                return f"{w}: action_id must be a string of at most 255 characters"
        return None
    if kind == "context":
        if set(block) - {"type", "elements", "block_id"}:
            return f"{where}: unknown context fields"
        elements = block.get("elements")
        if not isinstance(elements, list) or not 1 <= len(elements) <= 10:
            return f"{where}: elements must be 1..10 items"
        for j, element in enumerate(elements):
            if isinstance(element, dict) and element.get("type") == "image":
                if not is_http_url(element.get("image_url")) or not isinstance(element.get("alt_text"), str):
                    return f"{where}.elements[{j}]: an image needs image_url and alt_text"
                continue
            err = check_text_object(element, {"mrkdwn", "plain_text"}, 3000, f"{where}.elements[{j}]")
            if err:
                return err
        return None
    if kind == "divider":
        if set(block) - {"type", "block_id"}:
            return f"{where}: unknown divider fields"
        return None
    return f"{where}: unexpected block type {kind!r}"


def check_slack(doc):
    """(status, answer, why): Slack's answer to this incoming-webhook body."""
    if not isinstance(doc, dict):
        return 400, "invalid_payload", "the body is not a JSON object"
    unknown = sorted(set(doc) - SLACK_FIELDS)
    if unknown:
        return 400, "invalid_payload", f"unknown fields: {unknown}"
    text = doc.get("text")
    if not isinstance(text, str) or not text:
        return 400, "no_text", "text (the fallback shown in notifications) must be a non-empty string"
    if "blocks" in doc:
        blocks = doc["blocks"]
        if not isinstance(blocks, list) or not 1 <= len(blocks) <= 50:
            return 400, "invalid_blocks", "blocks must be a list of 1..50 blocks"
        for i, block in enumerate(blocks):
            err = check_block(block, i)
            if err:
                return 400, "invalid_blocks", err
    return 200, "ok", None


# --- the server --------------------------------------------------------------------------------


class State:
    def __init__(self, log_path, secret, fails):
        self.log = open(log_path, "a", encoding="utf-8")
        self.webhook = Webhook(secret) if secret else None
        self.fails = dict(fails)
        self.lock = threading.Lock()

    def take_failure(self, name):
        with self.lock:
            left = self.fails.get(name, 0)
            if left > 0:
                self.fails[name] = left - 1
                return True
            return False

    def record(self, entry):
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        with self.lock:
            self.log.write(line)
            self.log.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "notify-receiver"
    state: State

    def log_message(self, format, *args):  # the JSON log is the record; stderr stays quiet
        pass

    def read_body(self):
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def handle_any(self):
        body = self.read_body()
        headers = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        path = urlsplit(self.path).path
        verified, error, status, answer, ctype = self.route(path, body, headers)
        self.state.record({
            "method": self.command,
            "path": self.path,
            "headers": headers,
            "body": body.decode("utf-8", errors="replace"),
            "verified": verified,
            "error": error,
            "status_answered": status,
            "received_at": time.time(),
        })
        payload = answer.encode()
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def route(self, path, body, headers):
        """(verified, error, status, answer, content type) for one request."""
        text = "text/plain; charset=utf-8"
        if path.startswith("/dead/") or path == "/dead":
            return None, "a dead endpoint", 503, "dead", text
        parts = path.split("/")
        if self.command != "POST":
            return None, f"method {self.command} is not POST", 405, "method not allowed", text
        if len(parts) == 3 and parts[1] == "webhook" and parts[2]:
            return self.webhook(parts[2], body, headers)
        if path in ("/ntfy", "/ntfy/"):
            return self.ntfy(body)
        if len(parts) == 3 and parts[1] == "slack" and parts[2]:
            return self.slack(parts[2], body)
        return None, f"no route for {path}", 404, "not found", text

    def webhook(self, name, body, headers):
        text = "text/plain; charset=utf-8"
        if self.state.webhook is None:
            return None, "the receiver was started without --secret", 500, "no secret", text
        try:
            self.state.webhook.verify(body, headers)
        except WebhookVerificationError as e:
            return False, f"signature: {e}", 401, "bad signature", text
        except (ValueError, UnicodeDecodeError) as e:  # a verified body that is not JSON
            return True, f"the body is not JSON: {e}", 400, "not json", text
        if self.state.take_failure(name):
            return True, "scripted failure", 500, "scripted failure", text
        return True, None, 200, "ok", text

    def ntfy(self, body):
        as_json = "application/json"
        try:
            doc = json.loads(body)
        except ValueError as e:
            doc, why = None, f"the body is not JSON: {e}"
        else:
            why = check_ntfy(doc)
        if why:
            answer = json.dumps({"code": 40000, "http": 400, "error": why})
            return None, why, 400, answer, as_json
        if self.state.take_failure("ntfy"):
            return None, "scripted failure", 500, json.dumps({"code": 50000, "http": 500, "error": "scripted"}), as_json
        answer = json.dumps({
            "id": f"m{int(time.time() * 1000) % 10**12:012d}", "time": int(time.time()), "event": "message",
            "topic": doc["topic"], "message": doc.get("message", "triggered"),
        })
        return None, None, 200, answer, as_json

    def slack(self, name, body):
        text = "text/plain; charset=utf-8"
        try:
            doc = json.loads(body)
        except ValueError as e:
            return None, f"the body is not JSON: {e}", 400, "invalid_payload", text
        status, answer, why = check_slack(doc)
        if status != 200:
            return None, why, status, answer, text
        if self.state.take_failure(name):
            return None, "scripted failure", 500, "scripted failure", text
        return None, None, 200, "ok", text

    do_POST = do_GET = do_PUT = do_DELETE = do_PATCH = handle_any


def parse_fail(value):
    name, sep, count = value.partition("=")
    if not sep or not name or not count.isdigit():
        raise argparse.ArgumentTypeError(f"--fail takes NAME=N, got {value!r}")
    return name, int(count)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="the JSON-lines file every request is appended to")
    parser.add_argument("--secret", help="the Standard Webhooks secret (whsec_<base64>) of /webhook/*")
    parser.add_argument("--fail", action="append", type=parse_fail, default=[], metavar="NAME=N")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()

    Handler.state = State(args.log, args.secret, args.fail)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
