//go:build integration

package pgstore

// AdmitSQL is the statement of a lock's admission under Config.Quota.
func (s *Store) AdmitSQL() string { return s.qsql.admit }
