import Testing

/// One spelling an engine uses, and what it must be read as.
struct Spelling: Sendable, CustomTestStringConvertible {
    var engine: String
    var copy: String
    var original: String
    var device: String?
    var date: [Int]
    var isConflict = true

    var testDescription: String { "\(engine): \(copy)" }
}

/// Sources of the spellings:
/// - Syncthing: lib/model/folder_sendrecv.go, `conflictName`:
///   `name[:len(name)-len(ext)] + time.Now().Format(".sync-conflict-20060102-150405-") + lastModBy + ext`,
///   `ext := filepath.Ext(name)` (the last dot; Go's Ext of ".bashrc" is ".bashrc"); `lastModBy` is
///   the device's short ID, 7 characters of base32 (docs.syncthing.net/users/syncing.html,
///   "Conflicting Changes").
/// - Dropbox: help.dropbox.com/syncing-uploads/conflicted-copy ("The editor's username,
///   'conflicted copy', and the save date will be added to the filename"), seen in the field as
///   `readme (Sterling Auster's conflicted copy 2026-08-23).txt` and
///   `database (Pierre's MacBook Pro's conflicted copy 2026-02-13).kdbx`. The numbered form for a
///   second conflict the same day (` (1)` before the closing parenthesis) and the undated form
///   come from users' reports, not from a Dropbox document.
/// - Nextcloud and ownCloud: nextcloud/desktop src/common/utility.cpp, `makeConflictFileName`
///   (`" (conflicted copy "` + the sanitized user name + `" "` when known +
///   `dt.toString("yyyy-MM-dd hhmmss") + ")"`, inserted at the last dot unless it leads the name)
///   and `isConflictFile` / `conflictFileBaseNameFromPattern` (the older `"_conflict-"` tag, which
///   ownCloud clients before 2.5 wrote as `_conflict-yyyyMMdd-hhmmss`).
/// - rclone bisync: docs/content/bisync.md, "--conflict-loser": "the default in bisync prior to
///   v1.66 was to rename conflicts with `..path1` and `..path2`"; from v1.66 "the first conflict
///   for `file.txt` will be renamed `file.txt.conflict1`".
/// - unison: src/files.ml, `finishCopy` (`-copyonconflict`):
///   `" (conflict%s_on_%04d-%02d-%02d%s)"` with `" #N"` when the name is taken, added by
///   `Path.addToFinalName` before the last dot (src/path.ml); src/stasher.ml, `backupprefix`
///   `".bak.$VERSION."` (backups beside the file with `backuplocation = local`).
let spellings: [Spelling] = [
    Spelling(
        engine: "Syncthing",
        copy: "notes.sync-conflict-20261124-101500-ABCDEF1.md",
        original: "notes.md",
        device: "ABCDEF1",
        date: [2026, 11, 24, 10, 15, 0]
    ),
    Spelling(
        engine: "Syncthing",
        copy: "Makefile.sync-conflict-20261124-235959-Q7RSTU2",
        original: "Makefile",
        device: "Q7RSTU2",
        date: [2026, 11, 24, 23, 59, 59]
    ),
    Spelling(
        engine: "Syncthing",
        copy: ".sync-conflict-20261124-101500-ABCDEF1.bashrc",
        original: ".bashrc",
        device: "ABCDEF1",
        date: [2026, 11, 24, 10, 15, 0]
    ),
    Spelling(
        engine: "Syncthing",
        copy: "archive.tar.sync-conflict-20261124-101500-ABCDEF1.gz",
        original: "archive.tar.gz",
        device: "ABCDEF1",
        date: [2026, 11, 24, 10, 15, 0]
    ),
    // A conflict of a conflict copy: the outer marker is the one that counts.
    Spelling(
        engine: "Syncthing",
        copy: "notes.sync-conflict-20261124-101500-ABCDEF1.sync-conflict-20261125-080000-ZZZZZZ2.md",
        original: "notes.sync-conflict-20261124-101500-ABCDEF1.md",
        device: "ZZZZZZ2",
        date: [2026, 11, 25, 8, 0, 0]
    ),
    Spelling(
        engine: "Dropbox",
        copy: "notes (Ann's conflicted copy 2026-11-24).md",
        original: "notes.md",
        device: "Ann",
        date: [2026, 11, 24]
    ),
    Spelling(
        engine: "Dropbox",
        copy: "database (Pierre's MacBook Pro's conflicted copy 2026-02-13).kdbx",
        original: "database.kdbx",
        device: "Pierre's MacBook Pro",
        date: [2026, 2, 13]
    ),
    Spelling(
        engine: "Dropbox",
        copy: "notes (Ann's conflicted copy 2026-11-24 (1)).md",
        original: "notes.md",
        device: "Ann",
        date: [2026, 11, 24]
    ),
    Spelling(
        engine: "Dropbox",
        copy: "notes (Ann\u{2019}s conflicted copy).md",
        original: "notes.md",
        device: "Ann",
        date: []
    ),
    Spelling(
        engine: "Nextcloud",
        copy: "notes (conflicted copy 2026-11-24 101500).md",
        original: "notes.md",
        device: nil,
        date: [2026, 11, 24, 10, 15, 0]
    ),
    Spelling(
        engine: "Nextcloud",
        copy: "notes (conflicted copy Ann Smith 2026-11-24 101500).md",
        original: "notes.md",
        device: "Ann Smith",
        date: [2026, 11, 24, 10, 15, 0]
    ),
    Spelling(
        engine: "Nextcloud",
        copy: ".hidden (conflicted copy 2026-11-24 101500)",
        original: ".hidden",
        device: nil,
        date: [2026, 11, 24, 10, 15, 0]
    ),
    Spelling(
        engine: "Nextcloud",
        copy: "notes_conflict-20261124-101500.md",
        original: "notes.md",
        device: nil,
        date: [2026, 11, 24, 10, 15, 0]
    ),
    Spelling(engine: "rclone bisync", copy: "notes.md..path1", original: "notes.md", device: "path1", date: []),
    Spelling(engine: "rclone bisync", copy: "notes.md..path2", original: "notes.md", device: "path2", date: []),
    Spelling(engine: "rclone bisync", copy: "notes.md.conflict1", original: "notes.md", device: nil, date: []),
    Spelling(engine: "rclone bisync", copy: "notes.md.conflict12", original: "notes.md", device: nil, date: []),
    Spelling(
        engine: "unison",
        copy: "notes (conflict_on_2026-11-24).md",
        original: "notes.md",
        device: nil,
        date: [2026, 11, 24]
    ),
    Spelling(
        engine: "unison",
        copy: "notes (conflict #2_on_2026-11-24).md",
        original: "notes.md",
        device: nil,
        date: [2026, 11, 24]
    ),
    Spelling(
        engine: "unison",
        copy: ".bak.1.notes.md",
        original: "notes.md",
        device: nil,
        date: [],
        isConflict: false
    ),
]

/// Names that look like copies but are not (a lookalike must never be taken for a version).
let lookalikes: [String] = [
    "notes.sync-conflict-20261324-101500-ABCDEF1.md",  // month 13
    "notes.sync-conflict-2026112-101500-ABCDEF1.md",  // a short date
    "notes.sync-conflict-20261124-101500-abc.md",  // no device ID
    "notes.sync-conflict-20261124-101500-ABCDEF1.tar.gz",  // Syncthing keeps only the last extension
    "notes (conflicted copy).md",  // neither Dropbox (no owner) nor Nextcloud (no date)
    "notes (Ann's conflicted copy 2026-02-30).md",  // February 30
    "notes (Ann's conflicted copy 2026-11-24 (x)).md",
    "notes (conflicted copy 2026-11-24 251500).md",  // hour 25
    "notes (case clash from 2026-11-24 101500).md",  // a different item, not a version
    "notes (final).md",
    "my conflicted copy of notes.md",
    "notes.md.conflict0",
    "notes.md.conflictX",
    "notes.md.path1",
    "notes (conflict_on_2026-11-24_was_deleted).md",
    ".bak.x.notes.md",
    "2026-11-24.md",
    ".sync-conflict-20261124-101500-ABCDEF1",  // a copy of nothing
]
