package snapshot

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Source is the source of truth a Holder reads: everything, with the keys
// streamed so that a million keys are not held twice; the parts that a
// change names; and one key not in the snapshot.
type Source interface {
	// LoadSnapshotStream hands meta everything but the keys, then key
	// every key, all from one consistent read.
	LoadSnapshotStream(ctx context.Context, meta func(Data), key func(tenants.SnapshotKey) error) error
	// LoadMeta reads everything but the keys in one consistent read.
	LoadMeta(ctx context.Context) (Data, error)
	// LoadKeys hands key the keys with the given IDs that exist.
	LoadKeys(ctx context.Context, ids []string, key func(tenants.SnapshotKey) error) error
	// FindKey looks up one key that is not in the snapshot yet; an error
	// with code tollgate.ENOTFOUND when there is none.
	FindKey(ctx context.Context, hash tenants.KeyHash) (tenants.Key, error)
}

// DataSource serves the snapshot data that Data returns at each load and
// finds no key outside it: for tests and benchmarks of the check path
// without Postgres.
type DataSource struct {
	Data func() Data
}

// StaticSource returns a DataSource of the fixed data d.
func StaticSource(d Data) DataSource { return DataSource{Data: func() Data { return d }} }

// LoadSnapshotStream hands meta the data without keys, then key each key.
func (s DataSource) LoadSnapshotStream(_ context.Context, meta func(Data), key func(tenants.SnapshotKey) error) error {
	d := s.Data()
	keys := d.Keys
	d.Keys = nil
	meta(d)
	for _, k := range keys {
		if err := key(snapshotKey(k)); err != nil {
			return err
		}
	}
	return nil
}

// LoadMeta returns the data without keys.
func (s DataSource) LoadMeta(context.Context) (Data, error) {
	d := s.Data()
	d.Keys = nil
	return d, nil
}

// LoadKeys hands key the data's keys with the given IDs.
func (s DataSource) LoadKeys(_ context.Context, ids []string, key func(tenants.SnapshotKey) error) error {
	for _, k := range s.Data().Keys {
		if slices.Contains(ids, k.ID) {
			if err := key(snapshotKey(k)); err != nil {
				return err
			}
		}
	}
	return nil
}

// FindKey finds nothing: every key is in the data or unknown.
func (s DataSource) FindKey(context.Context, tenants.KeyHash) (tenants.Key, error) {
	return tenants.Key{}, tollgate.Errorf(tollgate.ENOTFOUND, "key not found")
}

// PostgresSource reads snapshot data through the feature stores.
type PostgresSource struct {
	db *pgxpool.Pool
	// region, when set, is the process's region: balances are read as
	// its check path draws on them (credits.Store.LoadRegion).
	region string
}

// NewPostgresSource returns a Source on db.
func NewPostgresSource(db *pgxpool.Pool) *PostgresSource { return &PostgresSource{db: db} }

// InRegion makes p read balances as region's check path draws on them,
// on its escrow (docs/regions.md, "Money"); "" is a deployment of one
// region.
func (p *PostgresSource) InRegion(region string) *PostgresSource {
	p.region = region
	return p
}

// LoadSnapshotStream reads every plan, tenant, override and service token
// and streams every key, in one read-only, repeatable-read transaction, so
// the snapshot is consistent: no tenant without its plan, no key without
// its tenant.
func (p *PostgresSource) LoadSnapshotStream(ctx context.Context, meta func(Data), key func(tenants.SnapshotKey) error) error {
	return postgres.ReadTx(ctx, p.db, func(tx pgx.Tx) error {
		d, err := loadMeta(ctx, tx, p.region)
		if err != nil {
			return err
		}
		meta(d)
		return tenants.NewStore(tx).ScanSnapshotKeys(ctx, nil, key)
	})
}

// LoadMeta reads everything but the keys in one consistent read.
func (p *PostgresSource) LoadMeta(ctx context.Context) (Data, error) {
	var d Data
	err := postgres.ReadTx(ctx, p.db, func(tx pgx.Tx) error {
		var err error
		d, err = loadMeta(ctx, tx, p.region)
		return err
	})
	return d, err
}

// LoadKeys reads the keys with the given IDs.
func (p *PostgresSource) LoadKeys(ctx context.Context, ids []string, key func(tenants.SnapshotKey) error) error {
	return tenants.NewStore(p.db).ScanSnapshotKeys(ctx, ids, key)
}

// FindKey looks up one key by hash.
func (p *PostgresSource) FindKey(ctx context.Context, hash tenants.KeyHash) (tenants.Key, error) {
	return tenants.NewStore(p.db).FindKeyByHash(ctx, hash)
}

func loadMeta(ctx context.Context, tx pgx.Tx, region string) (Data, error) {
	var d Data
	ps, ts, as := plans.NewStore(tx), tenants.NewStore(tx), auth.NewStore(tx)
	var err error
	if d.Plans, err = ps.List(ctx); err != nil {
		return d, err
	}
	if d.Tenants, err = ts.List(ctx); err != nil {
		return d, err
	}
	if d.Overrides, err = ts.AllOverrides(ctx); err != nil {
		return d, err
	}
	if d.Quota, err = quota.NewStore(tx).LoadAll(ctx); err != nil {
		return d, err
	}
	if region != "" {
		d.Credits, err = credits.NewStore(tx).LoadRegion(ctx, region)
	} else {
		d.Credits, err = credits.NewStore(tx).LoadAll(ctx)
	}
	if err != nil {
		return d, err
	}
	if d.SigningKeys, err = as.PublicKeys(ctx); err != nil {
		return d, err
	}
	d.ServiceTokens, err = as.ListServiceTokens(ctx)
	return d, err
}
