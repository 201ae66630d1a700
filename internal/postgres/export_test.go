package postgres

import (
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// MigrateUpFrom applies the migrations in files, for tests of what a
// failed migration says.
func MigrateUpFrom(pool *pgxpool.Pool, files fs.FS) error { return migrateUp(pool, files) }

// SetClock makes c read the time from now.
func (c *SchemaCheck) SetClock(now func() time.Time) { c.now = now }
