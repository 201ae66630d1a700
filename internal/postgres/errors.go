package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate/tollgate"
)

// SQLSTATE codes the stores act on.
const (
	UniqueViolation           = "23505"
	ForeignKeyViolation       = "23503"
	CheckViolation            = "23514"
	InvalidTextRepresentation = "22P02"
)

// PgError returns err's Postgres error, if its chain holds one.
func PgError(err error) (*pgconn.PgError, bool) {
	var pgErr *pgconn.PgError
	ok := errors.As(err, &pgErr)
	return pgErr, ok
}

// Is reports whether err is a Postgres error with SQLSTATE code.
func Is(err error, code string) bool {
	pgErr, ok := PgError(err)
	return ok && pgErr.Code == code
}

// IsDataException reports whether err is Postgres refusing a value
// (SQLSTATE class 22: a NUL character, bad UTF-8, a number out of range):
// the input's fault, and retrying cannot help.
func IsDataException(err error) bool {
	pgErr, ok := PgError(err)
	return ok && strings.HasPrefix(pgErr.Code, "22")
}

// Translate turns a Postgres error that no store translated into the
// application's vocabulary: a refused value (class 22) or a violated check
// constraint (23514) is EINVALID, naming the column when the constraint
// follows the <table>_<column>_check convention; a unique violation is
// ECONFLICT. Any other error is returned unchanged (and stays internal).
func Translate(err error) error {
	if tollgate.ErrorCode(err) != tollgate.EINTERNAL {
		return err
	}
	pgErr, ok := PgError(err)
	switch {
	case !ok:
		return err
	case strings.HasPrefix(pgErr.Code, "22"):
		return tollgate.Errorf(tollgate.EINVALID, "a value in the request cannot be stored (e.g. a NUL character, invalid UTF-8 or a number out of range)")
	case pgErr.Code == CheckViolation:
		field := constraintColumn(pgErr)
		return &tollgate.Error{Code: tollgate.EINVALID, Message: "the request has invalid fields",
			Fields: map[string]string{field: "is not allowed here (" + pgErr.ConstraintName + ")"}}
	case pgErr.Code == UniqueViolation:
		return tollgate.Errorf(tollgate.ECONFLICT, "already exists")
	}
	return err
}

// constraintColumn names the column a check constraint guards:
// "plan_rules_period_us_check" on table plan_rules is "period_us". A
// constraint named otherwise is named itself.
func constraintColumn(e *pgconn.PgError) string {
	if e.ColumnName != "" {
		return e.ColumnName
	}
	name := strings.TrimSuffix(e.ConstraintName, "_check")
	if col, ok := strings.CutPrefix(name, e.TableName+"_"); ok && col != "" {
		return col
	}
	if e.ConstraintName == "" {
		return "body"
	}
	return e.ConstraintName
}
