//! stub
use crate::engine::*;
/// x
pub struct WtEngine;
impl WtEngine {
    /// x
    pub fn open(_c: &EngineConfig) -> Result<Box<dyn Engine>, String> {
        Err("todo".into())
    }
}
