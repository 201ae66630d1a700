package tenants

import "github.com/tollgate/tollgate"

// validID reports whether s is a UUID as Postgres prints one: lower-case
// hex in groups of 8-4-4-4-12. IDs from requests are checked with it before
// they reach SQL, which compares them as uuid (so that the primary-key and
// tenant indexes serve the lookup): a malformed ID names nothing, and is
// ENOTFOUND without a query. Only the canonical form is accepted, the one
// every ID this package returns has, so that an ID matches as text
// wherever Go code compares IDs (as the admin server's tenant checks do).
//
// internal/auth has the same check for its IDs.
func validID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// optionalID returns id for a nullable uuid parameter: nil when id is "".
func optionalID(id string) *string {
	if id == "" {
		return nil
	}
	return &id
}

// errBadCursor answers a cursor that decodes but holds no valid ID: no
// list of ours returned it.
var errBadCursor = tollgate.Invalid(map[string]string{"cursor": "is not a cursor this list returned"})
