//! stub
pub mod duration;
pub mod model;
pub mod reconcile;
pub mod spec;
pub mod store;
pub mod view;
