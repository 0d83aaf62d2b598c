//! stub
use crate::engine::*;
/// x
pub struct LmdbEngine;
impl LmdbEngine {
    /// x
    pub fn open(_c: &EngineConfig) -> Result<Box<dyn Engine>, String> {
        Err("todo".into())
    }
}
