package auth

import "github.com/tollgate/tollgate/internal/audit"

// UserAudit describes a change to an admin user for the audit log: the
// record only, never the password or its hash.
func UserAudit(action string, before, after *User) audit.Change {
	u := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "user", TargetID: u.ID, TenantID: u.TenantID,
		Before: before, After: after}
}

// ServiceTokenAudit describes a change to a service token for the audit
// log: the record only, never the token.
func ServiceTokenAudit(action string, before, after *ServiceToken) audit.Change {
	st := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "service_token", TargetID: st.ID, Before: before, After: after}
}

// SessionsEndedAudit records that n sessions of u were ended.
func SessionsEndedAudit(u User, n int64) audit.Change {
	return audit.Change{Action: "user.sessions_revoke", TargetType: "user", TargetID: u.ID, TenantID: u.TenantID,
		After: map[string]int64{"sessions_ended": n}}
}
