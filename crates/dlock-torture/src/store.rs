//! The resource the clients protect, on a redis-server of its own that no fault touches:
//! a **fenced store** that refuses a write whose fencing token is lower than the highest
//! it has accepted, and an **unfenced counter** updated by read-modify-write with no
//! check at all (it shows what happens to storage that trusts the lock alone).

use redis::{Commands, Connection};

/// Accepts a write with a fence at least the highest seen (the same holder writes many
/// times), and refuses a smaller one: the stale holder's late write.
const FENCED_WRITE: &str = r"
local highest = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < highest then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
";

pub struct Store {
    conn: Connection,
    fence_key: String,
    counter_key: String,
    script: redis::Script,
}

impl Store {
    /// The store of one primitive's lock (each has its own fence and counter).
    pub fn connect(url: &str, primitive: &str) -> redis::RedisResult<Store> {
        let conn = redis::Client::open(url)?.get_connection()?;
        Ok(Store {
            conn,
            fence_key: format!("torture:{primitive}:highest-fence"),
            counter_key: format!("torture:{primitive}:counter"),
            script: redis::Script::new(FENCED_WRITE),
        })
    }

    /// Writes with `fence`; false when the store refused it as stale.
    pub fn fenced_write(&mut self, fence: u64) -> redis::RedisResult<bool> {
        let accepted: i64 = self
            .script
            .key(&self.fence_key)
            .arg(fence)
            .invoke(&mut self.conn)?;
        Ok(accepted == 1)
    }

    /// The read half of the unfenced read-modify-write.
    pub fn read_counter(&mut self) -> redis::RedisResult<u64> {
        Ok(self
            .conn
            .get::<_, Option<u64>>(&self.counter_key)?
            .unwrap_or(0))
    }

    /// The write half: sets what was read plus one, whatever happened meanwhile.
    pub fn write_counter(&mut self, value: u64) -> redis::RedisResult<()> {
        self.conn.set(&self.counter_key, value)
    }
}
