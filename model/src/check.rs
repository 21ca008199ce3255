//! The stateright model (WIP).
