"""Test MCP OAuth client: the Python MCP SDK's OAuthClientProvider against /mcp-oauth, login automated.

    .tools/oauth-venv/bin/python tests/oauth/client.py --url http://127.0.0.1:PORT/mcp-oauth --user alice \
        --submit-json '{"workdir": "...", "runtime": "fake", "profile": "review", "prompt": "complete:hello"}' \
        [--timeout 60] [--token-only]

The SDK does the OAuth part on the server's 401: protected resource metadata (from WWW-Authenticate
resource_metadata, then the well-known fallbacks), authorization server metadata, dynamic client
registration, authorization code + PKCE S256 + RFC 8707 resource, token. The browser step is automated
in `redirect_handler`: the authorization URL is walked with plain HTTP (the login form of
tests/oauth/idp.mjs filled with --user, its consent form submitted) up to the redirect to our
redirect_uri, whose code/state/iss are handed back by `callback_handler`; nothing listens there.

Then: initialize, tools/list, whoami (if listed), submit_agent_task with --submit-json, and
get_agent_task {task_id, wait_seconds: 5} until a terminal status. Prints ONE JSON line on stdout:
    {"tools": [...], "whoami": {...} | null, "task_id": "...", "status": "...", "access_token": "..."}
With --token-only it stops once the SDK holds a token (whatever the server then answers) and prints
    {"access_token": "..."}
Exit 0 on success; on any failure a message on stderr and exit 1. --timeout bounds the whole run.
"""

import argparse
import json
import sys
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

# Never listened on: the redirect to it is intercepted from the authorization server's Location header.
REDIRECT_URI = "http://127.0.0.1:33418/callback"
TERMINAL = {"succeeded", "failed", "cancelled", "interrupted"}
MAX_LOGIN_STEPS = 20


class Failure(Exception):
    """A clear reason to exit 1."""


class MemoryStorage:
    """In-memory TokenStorage: one run, one registration, one token."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Forms(HTMLParser):
    """Collects the <form>s of a page: action, method and the named <input>s with their values."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append({"action": a.get("action", ""), "method": a.get("method", "get").lower(), "fields": {}})
        elif tag == "input" and self.forms and a.get("name"):
            self.forms[-1]["fields"][a["name"]] = a.get("value", "")


def same_endpoint(url: str, target: str) -> bool:
    u, t = urlsplit(url), urlsplit(target)
    return (u.scheme, u.netloc, u.path) == (t.scheme, t.netloc, t.path)


async def walk_login(authorization_url: str, user: str) -> AuthorizationCodeResult:
    """Plays the browser: follows the authorization server's redirects, fills its forms, stops at REDIRECT_URI."""
    origin = urlsplit(authorization_url)[:2]
    async with httpx2.AsyncClient(follow_redirects=False, timeout=10) as http:
        response = await http.get(authorization_url)
        for _ in range(MAX_LOGIN_STEPS):
            if response.is_redirect:
                location = urljoin(str(response.url), response.headers["location"])
                if same_endpoint(location, REDIRECT_URI):
                    query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
                    if "error" in query:
                        raise Failure(f"authorization refused: {query}")
                    if "code" not in query:
                        raise Failure(f"redirect without code: {location}")
                    return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))
                if urlsplit(location)[:2] != origin:
                    raise Failure(f"the authorization server redirected off its origin, to {location}")
                response = await http.get(location)
                continue
            forms = Forms()
            forms.feed(response.text)
            form = next((f for f in forms.forms if f["method"] == "post"), None)
            if response.status_code != 200 or form is None:
                raise Failure(
                    f"login page {response.url} answered {response.status_code} without a form: {response.text[:500]}"
                )
            fields = dict(form["fields"])
            if "login" in fields:
                fields["login"] = user
            if "password" in fields:
                fields["password"] = "password"
            response = await http.post(urljoin(str(response.url), form["action"]), data=fields)
    raise Failure(f"no redirect to {REDIRECT_URI} after {MAX_LOGIN_STEPS} steps")


def oauth_provider(url: str, user: str, storage: MemoryStorage) -> OAuthClientProvider:
    result: list[AuthorizationCodeResult] = []

    async def redirect_handler(authorization_url: str) -> None:
        print(f"client.py: authorizing at {authorization_url}", file=sys.stderr)
        result.append(await walk_login(authorization_url, user))

    async def callback_handler() -> AuthorizationCodeResult:
        return result.pop()

    metadata = OAuthClientMetadata(
        client_name="agent-bridge oauth e2e client",
        redirect_uris=[REDIRECT_URI],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    return OAuthClientProvider(
        server_url=url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )


async def call(session: ClientSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(name, arguments)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        raise Failure(f"{name} failed: {text or result.structured_content}")
    if result.structured_content is None:
        raise Failure(f"{name} returned no structuredContent: {text}")
    return result.structured_content


# The last HTTP error answer seen (the SDK reports a refused MCP request only as "an error response").
last_error: list[str] = []


async def note_error(response: httpx2.Response) -> None:
    if response.status_code >= 400:
        challenge = response.headers.get("www-authenticate")
        last_error[:] = [
            f"{response.status_code} from {response.request.method} {response.request.url}"
            + (f", WWW-Authenticate: {challenge}" if challenge else "")
        ]


async def run(args: argparse.Namespace, submit: dict[str, Any]) -> dict[str, Any]:
    storage = MemoryStorage()
    auth = oauth_provider(args.url, args.user, storage)
    timeout = httpx2.Timeout(30, read=60)
    hooks = {"response": [note_error]}
    if args.token_only:
        async with httpx2.AsyncClient(auth=auth, timeout=timeout, event_hooks=hooks) as http:
            response = await http.post(
                args.url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"},
            )
            print(f"client.py: with the token the server answered {response.status_code}", file=sys.stderr)
        if storage.tokens is None:
            raise Failure(f"no token obtained (the server answered {response.status_code}: {response.text[:300]})")
        return {"access_token": storage.tokens.access_token}

    async with (
        httpx2.AsyncClient(auth=auth, timeout=timeout, event_hooks=hooks) as http,
        streamable_http_client(args.url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = [t.name for t in (await session.list_tools()).tools]
        whoami = await call(session, "whoami", {}) if "whoami" in tools else None
        submitted = await call(session, "submit_agent_task", submit)
        task_id = submitted.get("task_id")
        if not isinstance(task_id, str):
            raise Failure(f"submit_agent_task returned no task_id: {submitted}")
        status = submitted.get("status")
        while status not in TERMINAL:
            task = await call(session, "get_agent_task", {"task_id": task_id, "wait_seconds": 5})
            status = task.get("status")
        assert storage.tokens is not None
        return {
            "tools": tools,
            "whoami": whoami,
            "task_id": task_id,
            "status": status,
            "access_token": storage.tokens.access_token,
        }


def describe(err: BaseException) -> str:
    """The leaves of an exception group, or the exception itself, as one line each."""
    if isinstance(err, BaseExceptionGroup):
        return "; ".join(describe(e) for e in err.exceptions)
    return f"{type(err).__name__}: {err}" if not isinstance(err, Failure) else str(err)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the MCP endpoint, e.g. http://127.0.0.1:PORT/mcp-oauth")
    parser.add_argument("--user", required=True, help="the login name typed at the IdP (becomes the token's sub)")
    parser.add_argument("--submit-json", help="arguments of submit_agent_task, a JSON object")
    parser.add_argument("--timeout", type=float, default=60, help="seconds for the whole run (default 60)")
    parser.add_argument("--token-only", action="store_true", help="stop once a token is obtained; print it")
    args = parser.parse_args()
    submit: dict[str, Any] = {}
    if not args.token_only:
        if args.submit_json is None:
            parser.error("--submit-json is required unless --token-only")
        try:
            submit = json.loads(args.submit_json)
        except json.JSONDecodeError as err:
            parser.error(f"--submit-json is not JSON: {err}")
        if not isinstance(submit, dict):
            parser.error("--submit-json must be a JSON object")

    async def bounded() -> dict[str, Any]:
        with anyio.fail_after(args.timeout):
            return await run(args, submit)

    try:
        out = anyio.run(bounded)
    except TimeoutError:
        print(f"client.py: timed out after {args.timeout}s", file=sys.stderr)
        return 1
    except BaseException as err:  # noqa: BLE001 - every failure is reported the same way
        if isinstance(err, KeyboardInterrupt):
            raise
        hint = f" (last HTTP error seen: {last_error[0]})" if last_error else ""
        print(f"client.py: {describe(err)}{hint}", file=sys.stderr)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
