// Test authorization server: the npm `oidc-provider` on 127.0.0.1, issuing RS256 JWT access tokens for a resource.
//
//   node tests/oauth/idp.mjs --resource http://127.0.0.1:PORT/mcp-oauth [--resource URL2 ...] [--port 0] [--ttl 600]
//                            [--access-token-format jwt|opaque]
//
// When listening it prints ONE JSON line on stdout:
//   {"issuer": "http://127.0.0.1:N", "port": N, "kid": "...", "private_key_pem": "-----BEGIN PRIVATE KEY-----\n..."}
// (the PKCS#8 signing key, so a test can forge tokens with the real key). Everything else goes to stderr.
// It runs until killed.
//
// What it offers: open dynamic client registration (/reg), PKCE S256 required, resource indicators
// (RFC 8707: every --resource is a resource server, the first is also the default when a client names
// none; its access tokens are RS256 JWTs with aud = the resource, scope filtered to the agent-bridge:*
// roles, an extra email claim <sub>@example.test; or opaque with --access-token-format opaque),
// RFC 8414 + OpenID discovery, introspection (/token/introspection, RFC 7662; oidc-provider introspects
// opaque tokens only) for the pre-registered confidential client bridge-introspector /
// introspector-secret (HTTP Basic; form-post credentials work too), and a minimal login + consent UI at
// /interaction/<uid> (HTML forms: POST login=<name> logs in as sub=<name>; the consent form grants
// everything asked). No browser needed: any HTTP client with a cookie jar can walk it.
import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import Provider, { errors } from 'oidc-provider';

const ROLE_SCOPES = ['agent-bridge:viewer', 'agent-bridge:operator', 'agent-bridge:admin'];

function fail(message) {
  process.stderr.write(`idp.mjs: ${message}\n`);
  process.exit(2);
}

function options() {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        resource: { type: 'string', multiple: true },
        port: { type: 'string', default: '0' },
        ttl: { type: 'string', default: '600' },
        'access-token-format': { type: 'string', default: 'jwt' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    fail(`${err.message}\nusage: node idp.mjs --resource URL [--resource URL ...] [--port 0] [--ttl SECONDS] [--access-token-format jwt|opaque]`);
  }
  if (!values.resource?.length) fail('--resource URL is required');
  for (const r of values.resource) {
    const url = URL.parse(r);
    if (!url || !['http:', 'https:'].includes(url.protocol) || url.hash) {
      fail(`--resource must be an absolute http(s) URL without fragment, got ${JSON.stringify(r)}`);
    }
  }
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`--port must be 0..65535, got ${values.port}`);
  const ttl = Number(values.ttl);
  if (!Number.isInteger(ttl) || ttl < 1) fail(`--ttl must be a positive integer (seconds), got ${values.ttl}`);
  const format = values['access-token-format'];
  if (!['jwt', 'opaque'].includes(format)) fail(`--access-token-format must be jwt or opaque, got ${format}`);
  return { resources: values.resource, port, ttl, format };
}

const { resources, port: wantedPort, ttl, format } = options();

// A fresh RSA-2048 signing key per run; the private half is handed to the test on stdout.
const kid = randomUUID();
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingJwk = { ...privateKey.export({ format: 'jwk' }), kid, alg: 'RS256', use: 'sig' };
const privateKeyPem = privateKey.export({ type: 'pkcs8', format: 'pem' });

// Listen first (port 0 = the kernel picks) so the issuer can name the real port.
let handler = (_req, res) => { res.statusCode = 503; res.end(); };
const server = createServer((req, res) => handler(req, res));
await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(wantedPort, '127.0.0.1', resolve);
}).catch((err) => fail(`cannot listen on 127.0.0.1:${wantedPort}: ${err.message}`));
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  jwks: { keys: [signingJwk] },
  cookies: { keys: [randomBytes(32).toString('base64url')] },
  // Role scopes are listed here too: oidc-provider only accepts registered client `scope`
  // metadata (the MCP SDK sends the scopes it will ask for) made of these.
  scopes: ['openid', 'offline_access', ...ROLE_SCOPES],
  clients: [{
    client_id: 'bridge-introspector',
    client_secret: 'introspector-secret',
    grant_types: [],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  clientDefaults: { grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'] },
  responseTypes: ['code'],
  pkce: { required: () => true },
  ttl: {
    AccessToken: () => ttl,
    AuthorizationCode: 120,
    Grant: 3600,
    IdToken: 3600,
    Interaction: 600,
    RefreshToken: 3600,
    Session: 3600,
  },
  features: {
    devInteractions: { enabled: false },
    dPoP: { enabled: false }, // plain Bearer tokens only
    registration: { enabled: true, initialAccessToken: false },
    introspection: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (_ctx, _client, oneOf) => oneOf ?? resources[0],
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource) => {
        if (!resources.includes(resource)) throw new errors.InvalidTarget();
        return {
          scope: ROLE_SCOPES.join(' '),
          audience: resource,
          accessTokenTTL: ttl,
          accessTokenFormat: format,
          ...(format === 'jwt' ? { jwt: { sign: { alg: 'RS256' } } } : {}),
        };
      },
    },
  },
  extraTokenClaims: async (_ctx, token) => (token.accountId ? { email: `${token.accountId}@example.test` } : undefined),
  findAccount: async (_ctx, sub) => ({
    accountId: sub,
    claims: async () => ({ sub, email: `${sub}@example.test` }),
  }),
  interactions: { url: async (_ctx, interaction) => `/interaction/${interaction.uid}` },
});
provider.on('server_error', (_ctx, err) => process.stderr.write(`idp.mjs: server_error: ${err.stack}\n`));
provider.on('grant.error', (_ctx, err) => process.stderr.write(`idp.mjs: grant.error: ${err.message} ${err.error_description ?? ''}\n`));
provider.on('authorization.error', (_ctx, err) => process.stderr.write(`idp.mjs: authorization.error: ${err.message} ${err.error_description ?? ''}\n`));
provider.on('registration_create.error', (_ctx, err) => process.stderr.write(`idp.mjs: registration.error: ${err.message} ${err.error_description ?? ''}\n`));

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const page = (title, body) => `<!DOCTYPE html><html><head><meta charset="utf-8"><title>${escape(title)}</title></head><body><h1>${escape(title)}</h1>${body}</body></html>`;

async function formBody(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 16384) throw new Error('form too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

// GET /interaction/<uid> shows the login or consent form; POST .../login and .../confirm finish them.
async function interaction(req, res, path) {
  const [, , uid, action] = path.split('/');
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) throw new Error('interaction mismatch');
  const { prompt, params, session } = details;
  if (req.method === 'GET' && action === undefined) {
    res.setHeader('Content-Type', 'text/html; charset=utf-8');
    res.setHeader('Cache-Control', 'no-store');
    if (prompt.name === 'login') {
      res.end(page('Sign in', `<form method="post" action="/interaction/${escape(uid)}/login">`
        + '<label>User <input name="login" autofocus required></label> <button type="submit">Sign in</button></form>'));
    } else {
      const scopes = [...new Set([
        ...(prompt.details.missingOIDCScope ?? []),
        ...Object.values(prompt.details.missingResourceScopes ?? {}).flat(),
      ])];
      res.end(page('Consent', `<p>${escape(params.client_id)} asks for: ${escape(scopes.join(' ') || '(nothing new)')}</p>`
        + `<form method="post" action="/interaction/${escape(uid)}/confirm"><button type="submit">Allow</button></form>`));
    }
    return;
  }
  if (req.method === 'POST' && action === 'login' && prompt.name === 'login') {
    const login = (await formBody(req)).get('login')?.trim();
    if (!login) {
      res.statusCode = 400;
      res.end(page('Sign in', '<p>login is required</p>'));
      return;
    }
    await provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
    return;
  }
  if (req.method === 'POST' && action === 'confirm' && prompt.name === 'consent') {
    await formBody(req);
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    const { missingOIDCScope, missingOIDCClaims, missingResourceScopes } = prompt.details;
    if (missingOIDCScope) grant.addOIDCScope(missingOIDCScope.join(' '));
    if (missingOIDCClaims) grant.addOIDCClaims(missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(missingResourceScopes ?? {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
    return;
  }
  res.statusCode = 400;
  res.end(page('Error', `<p>unexpected ${escape(req.method)} ${escape(path)} for prompt ${escape(prompt.name)}</p>`));
}

const callback = provider.callback();
handler = (req, res) => {
  const path = new URL(req.url, issuer).pathname;
  if (!path.startsWith('/interaction/')) {
    callback(req, res);
    return;
  }
  interaction(req, res, path).catch((err) => {
    process.stderr.write(`idp.mjs: interaction ${req.method} ${path}: ${err.message}\n`);
    if (!res.headersSent) {
      res.statusCode = 400;
      res.setHeader('Content-Type', 'text/html; charset=utf-8');
    }
    res.end(page('Error', `<p>${escape(err.message)}</p>`));
  });
};

for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0));

process.stderr.write(`idp.mjs: oidc-provider listening, issuer ${issuer}, resources ${resources.join(' ')}, ${format} access tokens, TTL ${ttl}s\n`);
process.stdout.write(`${JSON.stringify({ issuer, port, kid, private_key_pem: privateKeyPem })}\n`);
