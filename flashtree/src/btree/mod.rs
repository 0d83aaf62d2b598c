//! The B+-tree: slotted nodes ([`node`]) and tree operations ([`tree`]).

pub mod node;
pub mod tree;
