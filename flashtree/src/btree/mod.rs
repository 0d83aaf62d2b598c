//! The B+-tree: slotted nodes ([`node`]) and tree operations ([`tree`]).

pub mod compact;
pub mod hash;
pub mod hint;
pub mod node;
pub mod tree;

// The buffer layer reads the page kind to spare inner nodes from eviction.
const _: () = assert!(node::PAGE_KIND_INNER == crate::buffer::PAGE_KIND_INNER);
const _: () = assert!(node::PAGE_KIND_LEAF == crate::buffer::PAGE_KIND_LEAF);
