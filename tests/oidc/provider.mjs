// A real OpenID Connect provider (the npm package oidc-provider) for XCE's oauth2 backend tests.
//
// Usage: node provider.mjs CONFIG.json   (the test writes the file; see tests/auth_backends/oidc.py)
// CONFIG: { port, cert_file, key_file, jwks: {keys: [private JWKs]}, clients: [...],
//           accounts: {sub: claims}, login_as: sub, device_interval: seconds }
//
// What is not oidc-provider's own behaviour, and why:
// - Interactions: instead of login and consent pages, GET /interaction/:uid logs in as
//   `login_as` and grants what the client asked for, so a test can finish a browser or device
//   login with plain HTTP requests (the device code confirm/abort form is oidc-provider's own).
// - oidc-provider's device grant neither announces a polling `interval` nor answers
//   `slow_down`; RFC 8628 (3.2, 3.5) lets a provider do both, and big providers do, so this
//   script adds `interval` and answers `slow_down` to a poll that comes sooner than that.
// - The client "xce-quick" gets device codes that expire after 1 second (expired_token test).
// Prints "listening <issuer>" on stdout when ready.

import fs from 'node:fs';
import https from 'node:https';
import Provider from 'oidc-provider';

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const issuer = `https://127.0.0.1:${cfg.port}`;

const provider = new Provider(issuer, {
  clients: cfg.clients,
  jwks: cfg.jwks,
  cookies: { keys: ['xce-test-cookie-key'] },
  scopes: ['openid', 'profile', 'groups'],
  claims: {
    openid: ['sub'], profile: ['preferred_username', 'name'], groups: ['groups', 'department'],
  },
  // Put the scope's claims into the ID token (providers such as Keycloak do so by mapping).
  conformIdTokenClaims: false,
  findAccount: async (ctx, sub) => (cfg.accounts[sub]
    ? { accountId: sub, claims: async (use) => accountClaims(sub, use) }
    : undefined),
  features: {
    devInteractions: { enabled: false },
    deviceFlow: { enabled: true },
    userinfo: { enabled: true },
  },
  pkce: { required: () => true, methods: ['S256'] },
  // HS256 is advertised on purpose: the backend must never accept it for ID tokens.
  enabledJWA: { idTokenSigningAlgValues: ['RS256', 'ES256', 'HS256'] },
  ttl: {
    DeviceCode: (ctx, code, client) => (client.clientId === 'xce-quick' ? 1 : 600),
  },
  renderError: async (ctx, out) => { ctx.type = 'json'; ctx.body = out; },
});

// `userinfo_only` claims are left out of ID tokens (as many providers do for big claims),
// so the backend's userinfo fallback is exercised.
function accountClaims(sub, use) {
  const { userinfo_only: extra = {}, ...claims } = cfg.accounts[sub];
  return use === 'userinfo' ? { sub, ...claims, ...extra } : { sub, ...claims };
}

const lastPoll = new Map();

provider.use(async (ctx, next) => {
  if (ctx.path.startsWith('/interaction/')) {
    await finishInteraction(ctx);
    return;
  }
  await next();
  if (ctx.path === '/device/auth' && ctx.status === 200 && ctx.body) {
    ctx.body = { ...ctx.body, interval: cfg.device_interval };
  }
  const code = ctx.oidc?.params?.device_code;
  if (ctx.path === '/token' && code && ctx.body?.error === 'authorization_pending') {
    const now = Date.now();
    const before = lastPoll.get(code);
    lastPoll.set(code, now);
    if (before !== undefined && now - before < cfg.device_interval * 1000) {
      ctx.body = { error: 'slow_down', error_description: 'poll at most every interval' };
    }
  }
});

async function finishInteraction(ctx) {
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const { prompt, params, session } = details;
  let result;
  if (prompt.name === 'login') {
    result = { login: { accountId: cfg.login_as } };
  } else {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
    if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
    for (const [resource, scopes] of Object.entries(prompt.details.missingResourceScopes || {})) {
      grant.addResourceScope(resource, scopes.join(' '));
    }
    result = { consent: { grantId: await grant.save() } };
  }
  ctx.redirect(await provider.interactionResult(ctx.req, ctx.res, result,
    { mergeWithLastSubmission: true }));
}

const server = https.createServer(
  { cert: fs.readFileSync(cfg.cert_file), key: fs.readFileSync(cfg.key_file) },
  provider.callback(),
);
server.listen(cfg.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${issuer}\n`);
});
// In-memory state only: nothing to flush, and waiting for keep-alive clients would be slow.
process.on('SIGTERM', () => process.exit(0));
