package tenants

import "github.com/tollgate/tollgate"

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
