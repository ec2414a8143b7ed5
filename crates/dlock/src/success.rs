//! A record of the last success of the work a lock guards, kept beside the lock by guarded
//! writes: what a job started on every replica by cron checks so that it runs once even
//! when the replicas' schedules are minutes apart (`dlock run --skip-if-ran-within`).
//!
//! The record is the lock's data key [`SUCCESS_RECORD`] with a Redis expiry: how long ago a
//! success was recorded is read from Redis's clock alone, so replicas whose clocks disagree
//! still agree on it. It is written only while the hold holds, so only a success under the
//! lock counts.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::guarded::Guarded;
use crate::raw::RawLock;

/// The data key (see [`Guard::data_key`]) of the record
/// [`Guard::record_success`] writes: `{NAME}:data:last-success`.
pub const SUCCESS_RECORD: &str = "last-success";

/// Longest time a success is remembered: a year.
pub const MAX_SUCCESS_MEMORY: Duration = Duration::from_secs(365 * 24 * 3600);

/// A success of the guarded work, as its record in Redis says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Success {
    /// How long ago it was recorded, by Redis's clock.
    pub ago: Duration,
    /// How much longer the record stands (it was written to last the window its writer
    /// named).
    pub stands_for: Duration,
}

impl<R: RawLock> Guard<R> {
    /// Records that the work under this hold succeeded, to be remembered for `remember`
    /// (by Redis's clock) under the lock's data key [`SUCCESS_RECORD`]; applied only while
    /// the hold holds ([`Error::Lost`] otherwise, nothing written). A later holder asks
    /// [`last_success`](Guard::last_success) to skip work that already ran.
    ///
    /// Not on a Redlock ([`Error::InvalidArgument`]): like every guarded write it needs
    /// the hold and the record on one server.
    ///
    /// ```no_run
    /// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
    /// use std::time::Duration;
    /// let hour = Duration::from_secs(3600);
    /// let guard = client.mutex("nightly-report")?.lock().await?;
    /// match guard.last_success().await? {
    ///     Some(success) if success.ago < hour => {} // another replica made it lately
    ///     _ => {
    ///         // ... make the report ...
    ///         guard.record_success(hour).await?;
    ///     }
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn record_success(&self, remember: Duration) -> Result<()> {
        let ms = remember.as_millis();
        if ms == 0 || remember > MAX_SUCCESS_MEMORY {
            return Err(Error::InvalidArgument(format!(
                "a success is remembered for 1ms to {}, not {}",
                crate::duration_text::humane(MAX_SUCCESS_MEMORY),
                crate::duration_text::humane(remember)
            )));
        }
        let ms = ms as u64;
        let batch = Guarded::new().command("SET", SUCCESS_RECORD, (ms, "PX", ms));
        self.apply(&batch).await.map(drop)
    }

    /// The last success recorded under this lock by
    /// [`record_success`](Guard::record_success) whose record still stands, read while
    /// this hold holds ([`Error::Lost`] otherwise). `None`: none within the window its
    /// writer named (or a record someone else wrote, which is ignored).
    pub async fn last_success(&self) -> Result<Option<Success>> {
        let batch =
            Guarded::new()
                .get(SUCCESS_RECORD)
                .command("PTTL", SUCCESS_RECORD, &[] as &[&str]);
        let replies = self.apply(&batch).await?;
        let [written, left] = replies.as_slice() else {
            return Err(Error::unexpected_reply(&replies));
        };
        let remembered: Option<String> = redis::from_redis_value(written.clone()).ok().flatten();
        let left: i64 = redis::from_redis_value(left.clone()).unwrap_or(-2);
        // The record names how long it was written to last: how long ago is that less
        // what is left.
        let remembered = remembered.and_then(|ms| ms.parse::<u64>().ok());
        Ok(match (remembered, u64::try_from(left)) {
            (Some(total), Ok(left)) if left <= total => Some(Success {
                ago: Duration::from_millis(total - left),
                stands_for: Duration::from_millis(left),
            }),
            _ => None,
        })
    }
}
