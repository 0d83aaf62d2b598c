//! MQSSD device model.
