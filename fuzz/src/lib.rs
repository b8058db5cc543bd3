//! Helpers shared by the fuzz targets.
