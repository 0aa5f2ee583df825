package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"

	"github.com/platformd/platformd/internal/admin"
)

// tokenSet checks presented tokens against the configured ones. It is
// never modified after newTokenSet and so safe for concurrent use.
type tokenSet struct {
	tokens []storedToken
}

// storedToken keeps a token as the SHA-256 digest of its value, so that a
// comparison takes the same time whatever the presented length.
type storedToken struct {
	name, role string
	digest     [sha256.Size]byte
}

func newTokenSet(tokens []admin.Token) (*tokenSet, error) {
	ts := &tokenSet{}
	for i, t := range tokens {
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("token %d: empty name", i)
		case t.Role != admin.RoleRead && t.Role != admin.RoleAdmin:
			return nil, fmt.Errorf("token %q: role %q, want %q or %q", t.Name, t.Role, admin.RoleRead, admin.RoleAdmin)
		case t.Value == "":
			return nil, fmt.Errorf("token %q: empty value", t.Name)
		}
		ts.tokens = append(ts.tokens, storedToken{name: t.Name, role: t.Role, digest: sha256.Sum256([]byte(t.Value))})
	}
	return ts, nil
}

// errBadToken is a presented token that matches none.
var errBadToken = errors.New("invalid token")

// check returns the name and role of the token presented. Every configured
// token is compared, without an early exit, so that timing tells nothing
// of which token matched or how far a guess got.
func (ts *tokenSet) check(presented string) (name, role string, err error) {
	digest := sha256.Sum256([]byte(presented))
	match := -1
	for i := range ts.tokens {
		eq := subtle.ConstantTimeCompare(digest[:], ts.tokens[i].digest[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 || presented == "" {
		return "", "", errBadToken
	}
	return ts.tokens[match].name, ts.tokens[match].role, nil
}
