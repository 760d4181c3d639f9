// A real OAuth 2.1 / OpenID Connect authorization server for the tests (oidc-provider, dev interactions):
//
//   node_modules/.bin/node tests/oauth_server.mjs [port]      (or $OAUTH_SERVER_PORT; 0 or none: any free port)
//
// It listens on 127.0.0.1 only, with issuer http://127.0.0.1:<port>, and prints `listening <port>` once it
// answers. Open dynamic client registration, PKCE required, the authorization code, refresh token and client
// credentials grants, introspection, and resource indicators (RFC 8707): every resource a client names gets
// JWT access tokens (RS256, RFC 9068) with that resource as their audience. Any login is accepted (its `sub`
// is the login); the test posts the login and consent forms itself (tests/oauth.py). Everything is in memory
// and the signing key is made at start: nothing outlives the process, which ends on SIGTERM or when its
// stdin closes (the test that started it is gone).
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';

import Provider from 'oidc-provider';

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

const configuration = {
  clients: [UPSTREAM_CLIENT],
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
