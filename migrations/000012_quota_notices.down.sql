DROP TABLE quota_forecasts;
