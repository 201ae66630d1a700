package auth

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Ops makes every change to admin users, their sessions, service tokens
// and signing keys. Each change is one method: a typed input, the actor
// who makes it, validation that names the offending fields
// (*tollgate.Error with Fields), and its own transaction (audit.Apply) in
// which exactly one audit entry is written. The admin API, the console
// and the CLI call these and nothing else to make such a change; whether
// the actor may is decided before (internal/access). Safe for concurrent
// use.
type Ops struct {
	db   postgres.Conn
	keys *SecretKeys
}

// NewOps returns the operations on db (a pool). keys seal the service
// tokens' signing keys: without them (nil) tokens cannot be issued nor
// keys resealed.
func NewOps(db postgres.Conn, keys *SecretKeys) *Ops { return &Ops{db: db, keys: keys} }

// CreateUserInput is a new admin user: the body of POST /users.
type CreateUserInput struct {
	Email    string `json:"email"`
	Role     Role   `json:"role"`
	TenantID string `json:"tenant_id"`
	// Password is generated, and returned once, when nil.
	Password *string `json:"password"`
}

// CreatedUser is a user just made.
type CreatedUser struct {
	User User `json:"user"`
	// Password is the generated password, shown this once; absent when
	// the input gave one.
	Password string `json:"password,omitempty"`
}

// CreateUser makes an admin user (user.create): ECONFLICT naming "email"
// when it is taken.
func (o *Ops) CreateUser(ctx context.Context, by audit.Actor, in CreateUserInput) (CreatedUser, error) {
	nu := NewUser{Email: in.Email, Role: in.Role, TenantID: in.TenantID}
	var res CreatedUser
	if in.Password != nil {
		nu.Password = *in.Password
	} else {
		nu.Password = GeneratePassword()
		res.Password = nu.Password
	}
	if err := nu.Validate(); err != nil {
		return CreatedUser{}, err
	}
	var err error
	res.User, err = audit.Create(ctx, o.db, by, "user.create", UserAudit,
		func(tx pgx.Tx) (User, error) { return NewStore(tx).CreateUser(ctx, nu) })
	if err != nil {
		return CreatedUser{}, err
	}
	return res, nil
}

// UserSessions is a user after a change that ended its sessions.
type UserSessions struct {
	User          User  `json:"user"`
	SessionsEnded int64 `json:"sessions_ended"`
}

// disabledUser is a user as the audit log records its disabling: with the
// number of sessions that ended with it.
type disabledUser struct {
	User
	SessionsEnded int64 `json:"sessions_ended"`
}

// DisableUser disables user id (user.disable, whose after holds
// sessions_ended): it can no longer sign in and its sessions end at once.
// Actors cannot disable themselves (ECONFLICT), so that the last operator
// is not locked out by mistake. An unknown user is ENOTFOUND.
func (o *Ops) DisableUser(ctx context.Context, by audit.Actor, id string) (UserSessions, error) {
	if by.ID != "" && by.ID == id {
		return UserSessions{}, tollgate.Errorf(tollgate.ECONFLICT, "you cannot disable yourself")
	}
	var res UserSessions
	err := audit.Apply(ctx, o.db, by, func(tx pgx.Tx) (audit.Change, error) {
		as := NewStore(tx)
		before, err := as.GetUser(ctx, id)
		if err != nil {
			return audit.Change{}, err
		}
		if res.User, res.SessionsEnded, err = as.DisableUser(ctx, id); err != nil {
			return audit.Change{}, err
		}
		c := UserAudit("user.disable", &before, &res.User)
		c.After = disabledUser{User: res.User, SessionsEnded: res.SessionsEnded}
		return c, nil
	})
	return res, err
}

// EndUserSessions ends every session of user id at once
// (user.sessions_revoke); the user may sign in again.
func (o *Ops) EndUserSessions(ctx context.Context, by audit.Actor, id string) (UserSessions, error) {
	var res UserSessions
	err := audit.Apply(ctx, o.db, by, func(tx pgx.Tx) (audit.Change, error) {
		as := NewStore(tx)
		var err error
		if res.User, err = as.GetUser(ctx, id); err != nil {
			return audit.Change{}, err
		}
		if res.SessionsEnded, err = as.EndUserSessions(ctx, id); err != nil {
			return audit.Change{}, err
		}
		return SessionsEndedAudit(res.User, res.SessionsEnded), nil
	})
	return res, err
}

// SessionConfig is how sessions are signed and how long they last.
type SessionConfig struct {
	// Secret signs session JWTs (HS256, at least MinSessionSecretLen
	// bytes); TTL is their lifetime.
	Secret []byte
	TTL    time.Duration
}

// StartSession signs u in (user.login, by u, naming the client address
// ip): it records a session that lasts cfg.TTL from now and returns its
// signed token. u is a user Store.Authenticate returned.
func (o *Ops) StartSession(ctx context.Context, u User, ip string, cfg SessionConfig, now time.Time) (string, Session, error) {
	var token string
	var s Session
	err := audit.Apply(ctx, o.db, audit.Actor{ID: u.ID, Name: u.Email, Operator: u.Role == RoleOperator},
		func(tx pgx.Tx) (audit.Change, error) {
			var err error
			if token, s, err = NewStore(tx).StartSession(ctx, u, cfg.Secret, cfg.TTL, now); err != nil {
				return audit.Change{}, err
			}
			return audit.Change{Action: "user.login", TargetType: "user", TargetID: u.ID, TenantID: u.TenantID,
				After: map[string]string{"ip": ip, "session_id": s.ID}}, nil
		})
	return token, s, err
}

// EndSession signs session s out (user.logout, by its user).
func (o *Ops) EndSession(ctx context.Context, by audit.Actor, s Session) error {
	return audit.Apply(ctx, o.db, by, func(tx pgx.Tx) (audit.Change, error) {
		if err := NewStore(tx).EndSession(ctx, s.ID); err != nil {
			return audit.Change{}, err
		}
		return audit.Change{Action: "user.logout", TargetType: "user", TargetID: s.User.ID,
			TenantID: s.User.TenantID, After: map[string]string{"session_id": s.ID}}, nil
	})
}

// Service token lifetimes.
const (
	minServiceTokenTTL = time.Minute
	maxServiceTokenTTL = 10 * 365 * 24 * time.Hour
	// DefaultServiceTokenTTL is a service token's lifetime when the
	// input does not say.
	DefaultServiceTokenTTL = 365 * 24 * time.Hour
)

// IssueServiceTokenInput is a new service token: the body of POST
// /service-tokens.
type IssueServiceTokenInput struct {
	Name string `json:"name"`
	// TTLS is the token's lifetime in seconds (DefaultServiceTokenTTL
	// when nil), from 60 s to 10 years.
	TTLS *int64 `json:"ttl_s"`
}

// Validate names each invalid field; the name is trimmed first.
func (in *IssueServiceTokenInput) Validate() error {
	f := map[string]string{}
	in.Name = strings.TrimSpace(in.Name)
	if in.Name == "" || len(in.Name) > 200 {
		f["name"] = "must be 1–200 characters"
	}
	if in.TTLS != nil && (*in.TTLS < int64(minServiceTokenTTL/time.Second) || *in.TTLS > int64(maxServiceTokenTTL/time.Second)) {
		f["ttl_s"] = "must be from 60 to 315360000 (10 years)"
	}
	return tollgate.Invalid(f)
}

func (in IssueServiceTokenInput) ttl() time.Duration {
	if in.TTLS == nil {
		return DefaultServiceTokenTTL
	}
	return time.Duration(*in.TTLS) * time.Second
}

// IssuedServiceToken is a service token just made.
type IssuedServiceToken struct {
	ServiceToken ServiceToken `json:"service_token"`
	// Token is the signed JWT, shown this once.
	Token string `json:"token"`
}

// IssueServiceToken issues a token for a caller of the check API
// (service_token.create).
func (o *Ops) IssueServiceToken(ctx context.Context, by audit.Actor, in IssueServiceTokenInput) (IssuedServiceToken, error) {
	if err := in.Validate(); err != nil {
		return IssuedServiceToken{}, err
	}
	var res IssuedServiceToken
	var err error
	res.ServiceToken, err = audit.Create(ctx, o.db, by, "service_token.create", ServiceTokenAudit,
		func(tx pgx.Tx) (st ServiceToken, err error) {
			res.Token, st, err = NewStore(tx).WithSecretKeys(o.keys).IssueServiceToken(ctx, in.Name, in.ttl())
			return st, err
		})
	return res, err
}

// RevokeServiceToken revokes token id (service_token.revoke): the check
// API refuses it (401) within a second.
func (o *Ops) RevokeServiceToken(ctx context.Context, by audit.Actor, id string) (ServiceToken, error) {
	return audit.Update(ctx, o.db, by, "service_token.revoke", ServiceTokenAudit,
		func(tx pgx.Tx) (ServiceToken, error) { return NewStore(tx).GetServiceToken(ctx, id) },
		func(tx pgx.Tx, _ ServiceToken) (ServiceToken, error) {
			as := NewStore(tx)
			if err := as.RevokeServiceToken(ctx, id); err != nil {
				return ServiceToken{}, err
			}
			return as.GetServiceToken(ctx, id)
		})
}

// ResealSigningKeys seals every stored signing key with the current
// secret key (signing_keys.reseal, whose after is the Resealed); see
// Store.ResealSigningKeys.
func (o *Ops) ResealSigningKeys(ctx context.Context, by audit.Actor) (Resealed, error) {
	var res Resealed
	err := audit.Apply(ctx, o.db, by, func(tx pgx.Tx) (audit.Change, error) {
		var err error
		if res, err = NewStore(tx).WithSecretKeys(o.keys).resealSigningKeys(ctx); err != nil {
			return audit.Change{}, err
		}
		return audit.Change{Action: "signing_keys.reseal", TargetType: "signing_keys", TargetID: "all", After: res}, nil
	})
	return res, err
}

// RetireUnreadableSigningKeys retires the signing keys that no configured
// secret key opens, after the key that sealed them was lost
// (signing_keys.retire on target "unreadable", whose after lists them as
// "retired"; written when there are none too), and returns their kids;
// see Store.RetireUnreadableSigningKeys.
func (o *Ops) RetireUnreadableSigningKeys(ctx context.Context, by audit.Actor) ([]string, error) {
	var retired []string
	err := audit.Apply(ctx, o.db, by, func(tx pgx.Tx) (audit.Change, error) {
		var err error
		if retired, err = NewStore(tx).WithSecretKeys(o.keys).RetireUnreadableSigningKeys(ctx); err != nil {
			return audit.Change{}, err
		}
		return audit.Change{Action: "signing_keys.retire", TargetType: "signing_keys", TargetID: "unreadable",
			After: map[string][]string{"retired": retired}}, nil
	})
	return retired, err
}
