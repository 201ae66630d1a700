package enforce

import (
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/snapshot"
)

// tokenCache remembers tokens whose signature verified, so the hot path
// pays for Ed25519 once per token. Revocation is still checked on every
// request against the snapshot.
type tokenCache struct {
	mu      sync.Mutex
	entries map[string]cachedToken
}

type cachedToken struct {
	id      string
	expires time.Time
}

const tokenCacheSize = 10_000

func (c *tokenCache) get(token string) (cachedToken, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[token]
	return e, ok
}

func (c *tokenCache) put(token string, e cachedToken) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= tokenCacheSize {
		clear(c.entries)
	}
	c.entries[token] = e
}

// TokenVerifier checks the service tokens that callers of the check API
// present. It is safe for concurrent use.
type TokenVerifier struct {
	holder *snapshot.Holder
	cache  tokenCache
}

// NewTokenVerifier returns a verifier against holder's current snapshot.
func NewTokenVerifier(holder *snapshot.Holder) *TokenVerifier {
	return &TokenVerifier{holder: holder, cache: tokenCache{entries: map[string]cachedToken{}}}
}

// Verify returns the ID of token when it is validly signed, unexpired at
// now, and known and unrevoked in the current snapshot; otherwise
// auth.ErrBadToken. The signature is checked once per token; revocation
// on every call.
func (v *TokenVerifier) Verify(token string, now time.Time) (string, error) {
	s := v.holder.Current()
	if token == "" || s == nil {
		return "", auth.ErrBadToken
	}
	e, hit := v.cache.get(token)
	if !hit {
		id, exp, err := auth.VerifyServiceToken(token, s.SigningKeys(), now)
		if err != nil {
			return "", auth.ErrBadToken
		}
		e = cachedToken{id: id, expires: exp}
		v.cache.put(token, e)
	}
	st, known := s.ServiceToken(e.id)
	if !now.Before(e.expires) || !known || (st.RevokedAt != nil && !st.RevokedAt.After(now)) {
		return "", auth.ErrBadToken
	}
	return e.id, nil
}
