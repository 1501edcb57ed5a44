//! The `report` stage kind (being written).
