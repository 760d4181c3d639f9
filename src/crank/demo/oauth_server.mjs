// A real OAuth 2.1 / OpenID Connect authorization server on one machine (oidc-provider, dev interactions): the
// one `crank demo --oauth` runs (crank.demo.oauth), and the tests' (tests/oauth.py):
//
//   node_modules/.bin/node src/crank/demo/oauth_server.mjs [port]      (or $OAUTH_SERVER_PORT; 0 or none: any free port)
//
// It listens on 127.0.0.1 only, with issuer http://127.0.0.1:<port>, and prints `listening <port>` once it
// answers. Open dynamic client registration, PKCE required, the authorization code, refresh token and client
// credentials grants, introspection, and resource indicators (RFC 8707): every resource a client names gets
// JWT access tokens (RS256, RFC 9068) with that resource as their audience. Any login is accepted (its `sub`
// is the login); the test posts the login and consent forms itself (tests/oauth.py). Everything is in memory
// and the signing key is made at start: nothing outlives the process, which ends on SIGTERM or when its
// stdin closes (the test that started it is gone).
import { createPublicKey, generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

import { SignJWT, jwtVerify } from 'jose';
import Provider, { errors } from 'oidc-provider';

const RESOURCE_SCOPES = 'tools:read tools:write tools:delete';

const requested = Number(process.argv[2] ?? process.env.OAUTH_SERVER_PORT ?? 0);
const server = createServer();
await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(requested, '127.0.0.1', resolve);
});
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}`;

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'test-rs256', use: 'sig', alg: 'RS256' };

// A confidential client registered up front, for Crank's own calls to an upstream API (the client credentials
// grant: tests/gateway/test_credentials.py); its tokens are opaque, checked by introspection.
const UPSTREAM_CLIENT = {
  client_id: 'crank-upstream',
  client_secret: 'upstream-secret',
  grant_types: ['client_credentials'],
  response_types: [],
  redirect_uris: [],
  token_endpoint_auth_method: 'client_secret_basic',
};

// Crank's own client for RFC 8693 token exchange (tests/gateway/test_token_exchange.py): it may exchange a user's
// access token issued here for one of an upstream API (grant registered below). oidc-provider has none built in.
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const EXCHANGE_CLIENT = {
  client_id: 'crank-exchange',
  client_secret: 'exchange-secret',
  grant_types: [TOKEN_EXCHANGE],
  response_types: [],
  redirect_uris: [],
  token_endpoint_auth_method: 'client_secret_basic',
};
// Users whose exchanges the provider refuses (no consent for the API): `access_denied`, as a real one would say.
const REFUSED_SUBJECTS = new Set(['mallory']);

const configuration = {
  clients: [UPSTREAM_CLIENT, EXCHANGE_CLIENT],
  jwks: { keys: [signingKey] },
  cookies: { keys: [randomBytes(32).toString('base64url')] },
  scopes: ['openid', 'offline_access', ...RESOURCE_SCOPES.split(' ')],
  claims: { openid: ['sub'] },
  // Any login is an account, whose subject is the login.
  async findAccount(ctx, sub) {
    return { accountId: sub, async claims() { return { sub }; } };
  },
  pkce: { required: () => true },
  // A registered `scope` does not limit a client here: the MCP SDK registers with the scope of the first
  // challenge it meets (`tools:read`) and asks for more on a step-up (403 insufficient_scope), which
  // oidc-provider would refuse as `invalid_scope` for a client registered with less. What a token gets is
  // decided per resource, at consent. (The validator runs for any registration once a custom property exists.)
  extraClientMetadata: {
    properties: ['test_client_note'],
    validator(ctx, key, value, metadata) {
      delete metadata.scope;
    },
  },
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true }, // open: no initial access token
    introspection: { enabled: true },
    clientCredentials: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // The resource the client asked for (the MCP SDK sends `resource=` at both endpoints).
      async defaultResource(ctx, client, oneOf) {
        return oneOf ?? ctx.oidc.params?.resource ?? undefined;
      },
      async useGrantedResource() {
        return true;
      },
      async getResourceServerInfo(ctx, resourceIndicator) {
        return {
          audience: resourceIndicator,
          scope: RESOURCE_SCOPES,
          accessTokenFormat: 'jwt',
          accessTokenTTL: 600,
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
};

const provider = new Provider(issuer, configuration);
provider.on('server_error', (ctx, error) => console.error('server_error', error));

// RFC 8693: the subject token must be a JWT access token this provider issued (any audience); the answer is a JWT
// for the requested audience (or resource), for the same subject, with the acting client in `act` (RFC 8693 4.1).
const publicKey = createPublicKey({ key: signingKey, format: 'jwk' });
const privateKey2 = privateKey;
let exchanges = 0;
provider.registerGrantType(TOKEN_EXCHANGE, async (ctx) => {
  const { params, client } = ctx.oidc;
  if (params.subject_token_type !== ACCESS_TOKEN_TYPE) {
    throw new errors.InvalidRequest('subject_token_type must be an access token');
  }
  let subject;
  try {
    ({ payload: subject } = await jwtVerify(params.subject_token, publicKey, { issuer }));
  } catch {
    throw new errors.InvalidGrant('the subject token is not a valid access token of this issuer');
  }
  if (REFUSED_SUBJECTS.has(subject.sub)) {
    throw new errors.AccessDenied('this user has not consented to the requested audience');
  }
  const audience = params.audience ?? params.resource;
  if (!audience) throw new errors.InvalidTarget('an audience or resource is required');
  exchanges += 1;
  const now = Math.floor(Date.now() / 1000);
  const token = await new SignJWT({ scope: params.scope ?? '', act: { sub: client.clientId }, jti: randomUUID() })
    .setProtectedHeader({ alg: 'RS256', kid: signingKey.kid, typ: 'at+jwt' })
    .setIssuer(issuer).setSubject(subject.sub).setAudience(audience)
    .setIssuedAt(now).setExpirationTime(now + 300)
    .sign(privateKey2);
  ctx.body = { access_token: token, issued_token_type: ACCESS_TOKEN_TYPE, token_type: 'Bearer', expires_in: 300 };
}, ['subject_token', 'subject_token_type', 'requested_token_type', 'audience', 'resource', 'scope'],
['audience', 'resource']);

// How many exchanges were made (tests count them: a cached exchanged token costs none).
provider.use(async (ctx, next) => {
  if (ctx.path === '/test/exchanges') {
    ctx.body = { exchanges };
    return;
  }
  await next();
});
server.on('request', provider.callback());

function stop() {
  server.close();
  server.closeAllConnections();
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.on('error', stop);
process.stdin.resume();

console.log(`listening ${port}`);
