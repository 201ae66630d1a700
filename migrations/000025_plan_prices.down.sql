DROP TABLE plan_prices;
