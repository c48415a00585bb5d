DROP TABLE IF EXISTS bunbox_leases;
