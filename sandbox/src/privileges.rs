//! Privilege removal for the command: no_new_privs, every capability set emptied (ambient,
//! bounding, inheritable, permitted, effective) and verified empty afterwards.

use caps::CapSet;

pub fn set_no_new_privs() -> std::io::Result<()> {
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Empty every capability set of the calling thread, then check that they are empty.
pub fn drop_all_capabilities() -> Result<(), String> {
    let e = |what: &str, err: caps::errors::CapsError| format!("{what}: {err}");
    caps::clear(None, CapSet::Ambient).map_err(|x| e("ambient", x))?;
    for cap in caps::all() {
        match caps::drop(None, CapSet::Bounding, cap) {
            Ok(()) => {}
            // capabilities newer than this kernel are not in its bounding set
            Err(_) if !caps::has_cap(None, CapSet::Bounding, cap).unwrap_or(false) => {}
            Err(err) => return Err(e("bounding", err)),
        }
    }
    caps::clear(None, CapSet::Inheritable).map_err(|x| e("inheritable", x))?;
    caps::clear(None, CapSet::Effective).map_err(|x| e("effective", x))?;
    caps::clear(None, CapSet::Permitted).map_err(|x| e("permitted", x))?;
    for set in [
        CapSet::Ambient,
        CapSet::Bounding,
        CapSet::Inheritable,
        CapSet::Permitted,
        CapSet::Effective,
    ] {
        let left = caps::read(None, set).map_err(|x| e("verify", x))?;
        if !left.is_empty() {
            return Err(format!("capability set {set:?} still holds {left:?}"));
        }
    }
    Ok(())
}
