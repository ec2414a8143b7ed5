//! A SQL table that checks fencing tokens: the resource side of dlock's fences.
//!
//! Each row remembers the largest fence it accepted (`last_fence`); an update carries the
//! writer's fence and changes the row only when that fence is at least `last_fence`
//! (equal: the same hold writing again). A holder that paused past its lease writes with
//! an older fence than its successor and changes nothing. The check and the write are one
//! `UPDATE`, so no other writer can slip between them.

use rusqlite::{params, Connection, OptionalExtension};

/// The accounts table, with the fence of the last accepted write per row.
pub fn create(db: &Connection) -> rusqlite::Result<()> {
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS accounts (
             id INTEGER PRIMARY KEY,
             balance INTEGER NOT NULL,
             last_fence INTEGER NOT NULL DEFAULT 0
         )",
    )
}

/// Sets account `id`'s balance as the holder of `fence`; `false` (nothing changed) when
/// a write with a larger fence was accepted before: the writer's hold is stale.
pub fn set_balance(db: &Connection, id: i64, balance: i64, fence: u64) -> rusqlite::Result<bool> {
    // SQLite integers are signed 64-bit; dlock's fences stay below 2^53.
    let fence = fence as i64;
    db.execute(
        "INSERT INTO accounts (id, balance, last_fence) VALUES (?1, ?2, ?3)
         ON CONFLICT (id) DO UPDATE SET balance = excluded.balance, last_fence = excluded.last_fence
         WHERE excluded.last_fence >= accounts.last_fence",
        params![id, balance, fence],
    )
    .map(|changed| changed == 1)
}

/// Account `id`'s balance and the fence of its last accepted write.
pub fn account(db: &Connection, id: i64) -> rusqlite::Result<Option<(i64, u64)>> {
    db.query_row(
        "SELECT balance, last_fence FROM accounts WHERE id = ?1",
        params![id],
        |row| Ok((row.get(0)?, row.get::<_, i64>(1)? as u64)),
    )
    .optional()
}
