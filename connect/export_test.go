package connect

// PostgresConnectorForTest is postgresConnector, for the external tests of the dialer.
var PostgresConnectorForTest = postgresConnector
