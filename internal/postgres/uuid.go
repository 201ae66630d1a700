package postgres

import "github.com/tollgate/tollgate"

// IsUUID is tollgate.IsUUID, beside the store code that checks IDs with
// it before they reach SQL.
func IsUUID(s string) bool { return tollgate.IsUUID(s) }

// OptionalID returns id as a nullable uuid parameter: nil when id is "".
func OptionalID(id string) *string {
	if id == "" {
		return nil
	}
	return &id
}
