package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
)

//go:embed settle.lua
var settleLua string

var settleScript = redis.NewScript(settleLua)

// Reply codes of settle.lua.
const (
	settleDone     = 0
	settleNotFound = 1
	settleConflict = 2
	settleNotDue   = 3
)

// Settle sets a hold's actual cost, or expires it, in one script call
// that changes the hold's record and the states it took from together.
// It returns limiter.ErrHoldNotFound, ErrHoldConflict, ErrHoldNotDue or
// ErrSettleCost as limiter.Settler says, and wrapped store errors.
func (s *Store) Settle(ctx context.Context, req limiter.Settle) (limiter.Settlement, error) {
	if err := req.Validate(); err != nil {
		return limiter.Settlement{}, err
	}
	expire := "0"
	if req.Expire {
		expire = "1"
	}
	args := []any{strconv.FormatInt(req.Cost, 10), strconv.FormatInt(req.NowUS, 10), expire, strconv.FormatInt(s.ExtraTTL.Milliseconds(), 10)}
	reply, err := settleScript.Run(ctx, s.client, []string{req.Key}, args...).Int64Slice()
	if err != nil {
		return limiter.Settlement{}, fmt.Errorf("redisstore: settle: %w", err)
	}
	if len(reply) < 6 {
		return limiter.Settlement{}, fmt.Errorf("redisstore: settle: reply of %d numbers", len(reply))
	}
	out := limiter.Settlement{NowUS: reply[1], Estimate: reply[2], Cost: reply[3], Status: limiter.HoldStatus(reply[4]), Repeated: reply[5] == 1}
	switch reply[0] {
	case settleDone:
		return out, nil
	case settleNotFound:
		return limiter.Settlement{}, limiter.ErrHoldNotFound
	case settleConflict:
		return out, limiter.ErrHoldConflict
	case settleNotDue:
		return out, limiter.ErrHoldNotDue
	}
	return limiter.Settlement{}, fmt.Errorf("redisstore: settle: reply code %d", reply[0])
}
