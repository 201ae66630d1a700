DROP TABLE usage_settlements;
