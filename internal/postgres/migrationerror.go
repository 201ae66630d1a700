package postgres

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4/database"
)

// MigrationError is a migration that Postgres refused: which one, where
// in its file, and Postgres's own error. It leaves out the statement
// golang-migrate puts in its error — the whole migration file, often a
// hundred lines and more — which buried the one line that says what went
// wrong. errors.As finds the *pgconn.PgError it wraps.
type MigrationError struct {
	// Version and File name the migration, e.g. 21 and
	// "000021_credit_late.up.sql"; 0 and "" when the statement that failed
	// is none of the files.
	Version uint
	File    string
	// Line and Column place the error in the file, both from 1; 0 when
	// Postgres gave no position.
	Line, Column int
	// Err is Postgres's error (a *pgconn.PgError), or the driver's.
	Err error
	// advice says what to do next; "" when it is not known.
	advice string
}

func (e *MigrationError) Error() string {
	var b strings.Builder
	b.WriteString("migration")
	if e.File != "" {
		fmt.Fprintf(&b, " %d (%s)", e.Version, e.File)
	}
	b.WriteString(" failed")
	if e.Line > 0 {
		fmt.Fprintf(&b, " at line %d, column %d", e.Line, e.Column)
	}
	b.WriteString(": ")
	if pgErr, ok := PgError(e.Err); ok {
		b.WriteString(pgErr.Error())
		for _, part := range []struct{ name, text string }{
			{"detail", pgErr.Detail}, {"hint", pgErr.Hint}, {"where", pgErr.Where},
		} {
			if part.text != "" {
				fmt.Fprintf(&b, "; %s: %s", part.name, part.text)
			}
		}
	} else {
		b.WriteString(e.Err.Error())
	}
	if e.advice != "" {
		b.WriteString(e.advice)
	}
	return b.String()
}

func (e *MigrationError) Unwrap() error { return e.Err }

// migrationError turns golang-migrate's error for a statement Postgres
// refused into a *MigrationError, finding the migration in files by the
// statement (a migration file runs as one statement). Any other error is
// returned as it is.
func migrationError(files fs.FS, err error) error {
	var failed database.Error
	if !errors.As(err, &failed) {
		var p *database.Error
		if !errors.As(err, &p) || p == nil {
			return err
		}
		failed = *p
	}
	me := &MigrationError{Err: failed.OrigErr}
	if me.Err == nil {
		me.Err = errors.New(failed.Err)
	}
	var versions []uint
	me.Version, me.File, versions = migrationFile(files, failed.Query)
	if pgErr, ok := PgError(failed.OrigErr); ok && pgErr.Position > 0 {
		me.Line, me.Column = position(string(failed.Query), int(pgErr.Position))
	}
	if me.File != "" {
		me.advice = migrationAdvice(me.Version, me.File, versions)
	}
	return me
}

// migrationAdvice says what to do after migration version (file) failed.
// A migration file is sent to Postgres as one simple-protocol query, which
// Postgres runs in one transaction (no migration controls transactions
// itself), so none of it was applied; golang-migrate has marked the
// schema dirty all the same, at the version it was moving to.
func migrationAdvice(version uint, file string, versions []uint) string {
	matches := version // a failed down step leaves the schema at its version
	if strings.HasSuffix(file, ".up.sql") {
		matches = 0 // a failed up step leaves it at the version before
		for _, v := range versions {
			if v < version {
				matches = v
			}
		}
	}
	again := "migrate up"
	if strings.HasSuffix(file, ".down.sql") {
		again = "migrate down"
	}
	return fmt.Sprintf(" (none of the migration was applied: it runs in one transaction; the schema still matches version %d "+
		"but is marked dirty: remove the cause, then `admin migrate force %d` and `admin %s` again)", matches, matches, again)
}

// migrationFile returns the version and name of the file in files whose
// text is query, and every version files hold, ascending.
func migrationFile(files fs.FS, query []byte) (version uint, name string, versions []uint) {
	entries, _ := fs.ReadDir(files, ".")
	seen := map[uint]bool{}
	for _, e := range entries {
		v, err := strconv.ParseUint(strings.SplitN(e.Name(), "_", 2)[0], 10, 32)
		if err != nil || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		if !seen[uint(v)] {
			seen[uint(v)] = true
			versions = append(versions, uint(v))
		}
		if name != "" {
			continue
		}
		if text, err := fs.ReadFile(files, e.Name()); err == nil && bytes.Equal(text, query) {
			version, name = uint(v), e.Name()
		}
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	return version, name, versions
}

// position returns the line and column, from 1, of the character at
// Postgres's position pos (from 1, in characters) of query; 0, 0 when pos
// is outside it.
func position(query string, pos int) (line, column int) {
	runes := []rune(query)
	if pos < 1 || pos > len(runes) {
		return 0, 0
	}
	line, column = 1, 1
	for _, r := range runes[:pos-1] {
		if r == '\n' {
			line, column = line+1, 1
		} else {
			column++
		}
	}
	return line, column
}
