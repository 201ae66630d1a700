DROP TABLE credit_regions;
