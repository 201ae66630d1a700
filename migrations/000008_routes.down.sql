-- Back to schema v6: plans lose their routes. Usage stays as v7 mapped
-- it (folded rows cannot be split again), which v6 reads as it is.
ALTER TABLE plans DROP COLUMN routes;
