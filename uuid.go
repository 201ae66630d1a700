package tollgate

// IsUUID reports whether s is a UUID as Postgres prints one: lower-case hex
// in groups of 8-4-4-4-12. IDs from requests are checked with it before
// they reach SQL, which compares them as uuid (so that the primary-key and
// tenant indexes serve the lookup): a malformed ID names nothing, and is
// "not found" without a query. Only the canonical form is accepted, the one
// every stored ID has, so that an ID also matches as text wherever Go code
// compares IDs (as the admin server's tenant checks do).
func IsUUID(s string) bool {
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
