import Foundation

// A read-only diagnosis of a sync container: what the seeds' troubleshooting pages have a person
// look at by hand (which devices take part, which logs each has and which are missing, damaged,
// half-written or duplicated by a sync engine, schema versions, healing requests, clocks,
// tombstones and compaction, the sentinel and the container's identity), gathered through the
// same decoders sync itself uses, each finding with what to do about it. Nothing in the container
// or the store is written. `concord doctor` prints it.

/// How serious a ``DiagnosisFinding`` is.
public enum DiagnosisSeverity: String, Codable, Sendable, Comparable, CaseIterable {
    /// Worth knowing; nothing to do (a harmless conflict copy, a file still arriving).
    case info
    /// Something to look at: it slows sync down, holds compaction back, or will need action if
    /// it lasts (a stale temporary file, a device that publishes no acknowledgement).
    case warning
    /// Something that keeps devices apart or loses data until someone acts (a missing or damaged
    /// log, two installations under one device id, a newer schema, a damaged sentinel).
    case problem

    /// The order of seriousness: `info < warning < problem`.
    public static func < (lhs: DiagnosisSeverity, rhs: DiagnosisSeverity) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// One thing the diagnosis found, with the file it concerns and what to do.
public struct DiagnosisFinding: Codable, Sendable, Hashable {
    /// How serious it is.
    public var severity: DiagnosisSeverity
    /// A stable, dotted code that scripts can match on (`log.gap`, `log.damaged`,
    /// `file.temporary`, `log.conflictCopy`, `schema.newer`, `healing.request`, `clock.skew`,
    /// `sentinel.missing`, `identity.missing`, ...).
    public var code: String
    /// The store folder it concerns (`nil` for the container as a whole).
    public var store: String?
    /// The device it concerns, if one.
    public var device: String?
    /// The file or folder it concerns, if one (a path).
    public var path: String?
    /// What was found, in words.
    public var message: String
    /// What to do about it.
    public var advice: String

    /// A finding.
    public init(
        _ severity: DiagnosisSeverity,
        _ code: String,
        store: String? = nil,
        device: String? = nil,
        path: String? = nil,
        message: String,
        advice: String
    ) {
        self.severity = severity
        self.code = code
        self.store = store
        self.device = device
        self.path = path
        self.message = message
        self.advice = advice
    }
}

/// One device's log file that is not a usable log, or one that stands beside the logs.
public struct DiagnosedFile: Codable, Sendable, Hashable {
    /// The file (a path).
    public var path: String
    /// Why it is listed (the decoder's error, or what the name says it is).
    public var reason: String
    /// How long ago it was last modified, in seconds (by this machine's clock).
    public var age: Double?
}

/// What one device's folder in a store of the container holds.
public struct DeviceDiagnosis: Codable, Sendable, Hashable {
    /// The device id (its folder's name).
    public var device: String
    /// Its registration in the sentinel, if it has one.
    public var registration: DeviceRegistration?
    /// How many intact logs its folder holds.
    public var logCount = 0
    /// The lowest and highest sequence of its intact logs.
    public var firstLog: UInt64?
    /// The highest sequence of its intact logs.
    public var lastLog: UInt64?
    /// Sequences missing between what a baseline covers (or 1) and its last log: sync waits for
    /// them before it applies the logs after them.
    public var gaps: [UInt64] = []
    /// Log files that do not decode, or whose header disagrees with their name.
    public var damaged: [DiagnosedFile] = []
    /// Intact logs in a newer file format than this version of Concord reads.
    public var unsupported: [DiagnosedFile] = []
    /// Temporary files: Concord's own (`.concord-tmp`, left by an interrupted write when old)
    /// or a sync engine's.
    public var temporaries: [DiagnosedFile] = []
    /// A sync engine's conflict copies of logs; `reason` says whether they hold the same log.
    public var conflictCopies: [DiagnosedFile] = []
    /// Files that are none of the above.
    public var unrecognized: [String] = []
    /// The schema versions its logs were written with, ascending.
    public var schemaVersions: [Int] = []
    /// The log file format versions its logs use, ascending.
    public var formatVersions: [Int] = []
    /// When its newest log was created, by its own clock.
    public var newestLogCreated: Date?
    /// What it says it has applied (`applied.json`), if it published that.
    public var acknowledgement: SyncAcknowledgement?
    /// The logs it asks other devices for (`requests.json`): device → sequences.
    public var requests: [String: [UInt64]] = [:]
    /// Its baselines: the total of positions each covers (from the name).
    public var baselines: [BaselineSummary] = []
}

/// A baseline file: a snapshot folded from logs that new devices start from.
public struct BaselineSummary: Codable, Sendable, Hashable {
    /// The file (a path).
    public var path: String
    /// For each device, the log sequence up to which the baseline covers its logs.
    public var covers: [String: UInt64]
    /// How many record changes it holds.
    public var changes: Int
    /// How many of them are tombstones (deletions kept so that a late write cannot bring the
    /// record back).
    public var tombstones: Int
    /// The schema version it was written with.
    public var schemaVersion: Int
}

/// An estimate of how far two devices' wall clocks disagree, from what their logs prove.
public struct ClockSkew: Codable, Sendable, Hashable {
    /// The device whose clock is behind.
    public var behind: String
    /// The device whose clock is ahead.
    public var ahead: String
    /// At least this many seconds.
    public var seconds: Double
    /// How it was seen.
    public var evidence: String
}

/// What the local store (when one is given) has applied of a store folder, and what waits.
public struct LocalStoreState: Codable, Sendable, Hashable {
    /// The store's device id (`nil`: sync was never set up on it).
    public var device: String?
    /// The store's schema version.
    public var schemaVersion: Int
    /// For each other device: the logs applied, through (without a gap).
    public var applied: [String: UInt64] = [:]
    /// For each other device: logs applied past a gap.
    public var appliedPastGaps: [String: [UInt64]] = [:]
    /// For each other device: intact logs in the container that are not applied yet.
    public var pending: [String: [UInt64]] = [:]
    /// The last log this device committed (`nil`: none).
    public var committed: UInt64?
    /// How many committed logs wait in the store's outbox to be written, or are kept for healing.
    public var outbox: Int = 0
    /// How many tombstones the store keeps (clocks of deleted records, and writes waiting for
    /// their record's creation).
    public var tombstones: Int = 0
    /// The container identities this store recorded when it joined.
    public var containerIDs: [String] = []
    /// Lifecycle marks: `contributed`, `disabled`, `joining`, `deviceIDInUse` (another
    /// installation writes under this device's id: sync stopped), `newDeviceID` (the store took a
    /// new device id and has not joined under it yet) when set.
    public var marks: [String] = []
}

/// What one store folder of the container holds.
public struct StoreFolderDiagnosis: Codable, Sendable, Hashable {
    /// The store's name (its folder's name).
    public var name: String
    /// The folder (a path).
    public var path: String
    /// The sentinel strategy found: `device files` (`sentinels/`), `device list`
    /// (`devices.plist`), or `none`.
    public var sentinel: String
    /// Every registration the sentinel holds.
    public var registrations: [DeviceRegistration] = []
    /// The container identities found (`container.plist` and its conflict copies).
    public var containerIDs: [String] = []
    /// Every device folder.
    public var devices: [DeviceDiagnosis] = []
    /// Clock disagreements the logs prove.
    public var clockSkews: [ClockSkew] = []
    /// The local store's state, when one was given.
    public var local: LocalStoreState?
}

/// A read-only diagnosis of a container: its stores, their devices and files, and findings.
public struct ContainerDiagnosis: Codable, Sendable {
    /// The container (a path).
    public var container: String
    /// When the diagnosis was made (this machine's clock).
    public var date: Date
    /// The store folders diagnosed.
    public var stores: [StoreFolderDiagnosis] = []
    /// Everything found, most serious first.
    public var findings: [DiagnosisFinding] = []

    /// The most serious finding's severity (`nil`: nothing found).
    public var severity: DiagnosisSeverity? { findings.map(\.severity).max() }
}
