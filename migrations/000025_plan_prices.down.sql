-- Loses the plans' price history: binaries of schema 24 price every month
-- not yet closed at the plans' current prices, so close the months that
-- have ended before going down.
DROP TABLE plan_prices;
