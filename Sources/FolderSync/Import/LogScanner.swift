import ConcordSystem
import Foundation
import Synchronization

/// A log the scanner found complete and valid.
public struct ScannedLog: Sendable, Hashable {
    /// The file it was read from: the log's own name, or a conflict copy standing in for it.
    public var url: URL
    /// The log. Its payload is empty when the scanner does not keep payloads
    /// (``LogScanner/keepsPayloads``) and this scan's ``LogScanner/payloadBudget`` was spent, or
    /// the log was read by an earlier scan: read the file again to apply it.
    public var log: LogFile
    /// What the log depends on (``SyncPayload/dependencies``), read when it was scanned.
    public var dependencies: [String: UInt64]
    /// A digest of the payload, to compare a conflict copy with its original.
    var payloadDigest: UInt64
    /// How many bytes the payload has (also when it was not kept).
    var payloadSize = 0
    /// How many changes the payload carries (`nil`: not known without decoding it).
    var changeCount: Int?

    /// Whether this is an empty log its device published in place of one it had lost (it names
    /// its own device among its dependencies, which no other log does): the original may still
    /// turn up, and is applied then.
    var isStandIn: Bool { changeCount == 0 && dependencies[log.device] != nil }

    /// A scanned log.
    public init(url: URL, log: LogFile) {
        self.url = url
        self.log = log
        dependencies = (try? SyncPayload.dependencies(of: log)) ?? [:]
        payloadDigest = LogScanner.digest(log.payload)
        payloadSize = log.payload.count
        changeCount = SyncPayload.changeCount(of: log)
    }

    init(
        url: URL,
        log: LogFile,
        dependencies: [String: UInt64],
        payloadDigest: UInt64,
        payloadSize: Int,
        changeCount: Int?
    ) {
        self.url = url
        self.log = log
        self.dependencies = dependencies
        self.payloadDigest = payloadDigest
        self.payloadSize = payloadSize
        self.changeCount = changeCount
    }
}

/// What one ``LogScanner/scan(after:replacedContainers:versionsApplied:)`` found.
public struct ScanReport: Sendable {
    /// Complete, valid logs of other devices, one per (device, sequence), sorted by device and
    /// then sequence. Valid means the file decodes and its header names the folder's device and
    /// the sequence of its file name.
    public var ready: [ScannedLog] = []
    /// Files that do not decode yet but may still be arriving: seen for the first time, changed
    /// since the previous scan, or not yet stable for the settle interval. Benign; look again later.
    public var waiting: [URL] = []
    /// Files that are not usable logs and have stopped changing: damaged, cut short for good,
    /// with a header that does not match their name, or a conflict copy holding a different log
    /// (``SyncError/Code/conflictingLog``). Each is reported once; it is reported again only if
    /// the file changes and is still bad.
    public var corrupt: [SyncError] = []
    /// Intact logs in a newer file format than this version reads
    /// (``SyncError/Code/unsupportedLogVersion``), each reported once.
    public var unsupported: [SyncError] = []
    /// A file-sync engine's conflict copies that hold the same log as the original: harmless.
    public var conflictCopies: [URL] = []
    /// Versions of logs not applied yet, of logs that were applied in another version: the
    /// original of a stand-in (see `scan`'s `versionsApplied`) found under its name or in a
    /// conflict copy, or a conflict copy holding a different log than its original (also
    /// reported in ``corrupt`` as ``SyncError/Code/conflictingLog``). Each is to be applied once
    /// its log is applied in some version. At most one per log and scan, sorted by device and
    /// then sequence.
    public var lateVersions: [ScannedLog] = []
    /// How many temporary files (Concord's or a sync engine's) were skipped.
    public var temporaries: Int = 0
    /// Entries that are none of the above and were skipped: unrelated files, folders whose name
    /// is not a device id, anything that is not a regular file or folder where one is expected.
    public var unrecognized: [URL] = []
    /// How many log files (and conflict copies) the scan read and decoded: what a scan costs
    /// beyond listing the folders. Logs already applied are not read; without
    /// ``LogScanner/keepsPayloads``, neither is a valid log the previous scan read, unchanged since.
    public var filesRead = 0

    /// An empty report.
    public init() {}
}

/// Finds the logs in a container, copes with what file-sync engines leave there, and remembers
/// between scans what it has seen, so that a file still arriving waits and a damaged one is
/// reported once.
///
/// Each scan lists every device folder of the store: other devices' logs become
/// ``ScanReport/ready``; this device's own folder is read only for conflict copies (its logs are
/// never ready: they are this device's own history). The scanner never writes, renames or
/// deletes anything in the container.
///
/// Scans may run from any thread; two scans running at once each see a consistent container
/// but may both report the same corrupt file, so an importer should run one at a time.
///
/// A file that does not decode is *stable* unless it changed since the previous scan, once its
/// modification time is at least `settleInterval` before `now()` (so a one-shot process judges it
/// at its first scan) or it has had the same size, modification time and inode for
/// `settleInterval` of successive scans.
/// Until it is stable it is waiting (still arriving); once stable it is corrupt.
public final class LogScanner: Sendable {
    /// The layout of the store being scanned.
    public let layout: ContainerLayout
    /// This device's id: its folder's logs are not reported as ready.
    public let ownDevice: String
    /// How long a file that does not decode must stay unchanged before it counts as corrupt.
    public let settleInterval: Duration

    /// Whether ready logs keep their payloads. Without, a scan keeps the payloads of the logs it
    /// reads up to ``payloadBudget`` bytes, however many logs wait: the importer applies those
    /// as they were read, and reads the others again when it applies them.
    public let keepsPayloads: Bool

    /// How many payload bytes one scan keeps without ``keepsPayloads``: the common pass (a few
    /// small logs arrived) reads each log once; a large backlog holds no more than this.
    public static let payloadBudget = 4 << 20

    private let now: @Sendable () -> Date
    private let state = Mutex(ScanState())
    /// Device folders' listings from earlier scans (see ``FolderListings``).
    private let listings = FolderListings()
    /// Valid logs read by the previous scan, header only (without ``keepsPayloads``), by path: a
    /// log that waits (behind a gap, or for a dependency) is not read again while its stamp holds.
    private let headers = Mutex<[String: FileObservation]>([:])

    /// FNV-1a over `data`.
    static func digest(_ data: Data) -> UInt64 {
        data.withUnsafeBytes { buffer in
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in buffer {
                hash ^= UInt64(byte)
                hash = hash &* 0x0000_0100_0000_01b3
            }
            return hash
        }
    }

    /// ``settleInterval`` in seconds.
    var settleSeconds: Double {
        Double(settleInterval.components.seconds) + Double(settleInterval.components.attoseconds) / 1e18
    }

    /// A scanner of `layout`'s store on behalf of `ownDevice`.
    ///
    /// - Parameter layout: the container and the store to scan.
    /// - Parameter ownDevice: this device's id (see ``ownDevice``).
    /// - Parameter settleInterval: see ``settleInterval``.
    /// - Parameter now: the clock that decides when a file has settled (inject one in tests).
    /// - Parameter keepsPayloads: whether ready logs keep their payloads (see ``keepsPayloads``).
    public init(
        layout: ContainerLayout,
        ownDevice: String,
        settleInterval: Duration = .seconds(2),
        keepsPayloads: Bool = true,
        now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.layout = layout
        self.ownDevice = ownDevice
        self.settleInterval = settleInterval
        self.keepsPayloads = keepsPayloads
        self.now = now
    }

    /// Lists the store's device folders and classifies every file in them.
    ///
    /// - Parameter applied: for each device, the sequence up to which its logs have been applied.
    ///   This device's own logs are reported only when it is named here. Logs at or below it are
    ///   neither read nor reported (unless a conflict copy needs comparing
    ///   with one), so a scan costs what is new, not the whole history.
    /// - Parameter replacedContainers: identities of containers replaced by the one scanned: a log
    ///   written for one of them (``LogFile/container``) is reported as corrupt, not ready (its
    ///   writer had not seen the replacement; it gives it up or exports it again when it joins).
    /// - Parameter versionsApplied: for each device, its ``LogVersions``: the logs met in more
    ///   than one version or applied empty (a stand-in its device published for a log it had
    ///   lost, a log given up on), with the payload digests of the versions applied, and the
    ///   numbers its numbering leapt over. Those files and their conflict copies are looked at on
    ///   every scan, and a valid version not applied yet is reported in
    ///   ``ScanReport/lateVersions``.
    /// - Throws: ``SyncError/Code/containerUnavailable`` if the container or the store's folder
    ///   is missing or cannot be listed. A store folder without a `devices` folder is empty.
    public func scan(
        after applied: [String: UInt64] = [:],
        replacedContainers: Set<String> = [],
        versionsApplied: [String: LogVersions] = [:]
    ) throws(SyncError) -> ScanReport {
        let observations = try observe(after: applied, watching: versionsApplied)
        let instant = now()
        let settle =
            Double(settleInterval.components.seconds)
            + Double(settleInterval.components.attoseconds) / 1e18
        return state.withLock { state in
            state.decide(
                observations,
                ownDevice: ownDevice,
                replacedContainers: replacedContainers,
                versionsApplied: versionsApplied,
                now: instant,
                settle: settle
            )
        }
    }

    // MARK: - Reading the container (no lock held)

    private func observe(
        after applied: [String: UInt64],
        watching versionsApplied: [String: LogVersions]
    ) throws(SyncError) -> Observations {
        for folder in [layout.container, layout.storeFolder] where !isDirectory(folder) {
            throw SyncError(.containerUnavailable, "missing or not a folder", url: folder)
        }
        var result = Observations()
        let known = keepsPayloads ? [:] : headers.withLock { $0 }
        defer { if !keepsPayloads { headers.withLock { $0 = result.headers } } }
        let devicesFolder = layout.devicesFolder
        guard let deviceNames = try list(devicesFolder, missingIsEmpty: true, unavailable: true) else { return result }
        for name in deviceNames.sorted() {
            let folder = layout.deviceFolder(name)
            guard ContainerLayout.isValidDeviceID(name), isDirectory(folder) else {
                if ContainerLayout.classify(fileName: name) == .temporary {
                    result.temporaries += 1
                } else {
                    result.unrecognized.append(folder)
                }
                continue
            }
            // A folder that vanished or cannot be listed in the meantime: nothing in it this time.
            guard
                let listing = try? listings.listing(
                    of: folder,
                    list: { () throws(SyncError) in try list(folder, missingIsEmpty: true, unavailable: false) }
                )
            else { continue }
            var device = DeviceObservation(device: name)
            // Own logs are this device's history, read only when the caller asks (by naming a
            // position for this device: after its data was replaced with the container's).
            device.floor = applied[name] ?? (name == ownDevice ? UInt64.max : 0)
            result.temporaries += listing.temporaries
            result.unrecognized += listing.others.map { folder.appendingPathComponent($0, isDirectory: false) }
            let copyNames = listing.copies.map {
                ($0.sequence, folder.appendingPathComponent($0.name, isDirectory: false))
            }
            // This device's own logs are read only to compare conflict copies with; other
            // devices' logs from just past what has been applied.
            // (And logs applied empty, whose original may turn up under their name.)
            // (And logs met in more than one version or applied empty, and logs under numbers
            // their device leapt over.)
            let versions = versionsApplied[name] ?? LogVersions()
            device.voided = versions.voids.isEmpty ? [] : Set(listing.logs.map(\.sequence).filter(versions.isVoid))
            let copied = Set(listing.copies.map(\.sequence)).union(versions.digests.keys).union(device.voided)
            let floor = device.floor
            var wanted = Array(listing.logs(after: floor))
            if !copied.isEmpty {
                let past = Set(wanted.map(\.sequence))
                wanted = listing.logs.filter { copied.contains($0.sequence) && !past.contains($0.sequence) } + wanted
            }
            for (sequence, fileName) in wanted {
                let url = folder.appendingPathComponent(fileName, isDirectory: false)
                guard let file = read(url, into: &result, known: known) else { continue }
                guard let file else {
                    result.unrecognized.append(url)
                    continue
                }
                device.logs[sequence] = file
            }
            for (sequence, url) in copyNames {
                guard let file = read(url, into: &result, known: known) else { continue }
                guard let file else {
                    result.unrecognized.append(url)
                    continue
                }
                device.copies.append((sequence, file))
            }
            result.devices.append(device)
        }
        return result
    }

    /// The names in `device`'s folder that are neither logs, conflict copies nor temporary files
    /// (acknowledgements, requests, baselines), from the listing scans keep: a folder unchanged
    /// since it was listed is not listed again. Empty when the folder is missing.
    func otherNames(inFolderOf device: String) -> [String] {
        let folder = layout.deviceFolder(device)
        let listing = try? listings.listing(of: folder) { () throws(SyncError) in
            try list(folder, missingIsEmpty: true, unavailable: false)
        }
        return (listing ?? nil)?.others ?? []
    }

    /// The file's stamp and what decoding it gave; `nil` if it vanished; `.some(nil)` if it is
    /// not a regular file. A valid log `known` from the previous scan under the same stamp is not
    /// read again; what is read counts in `result`, and valid headers are kept there.
    private func read(
        _ url: URL,
        into result: inout Observations,
        known: [String: FileObservation]
    ) -> FileObservation?? {
        guard let file = read(url, known: known[url.path]) else { return nil }
        guard let file else { return .some(nil) }
        if file.stamp != known[url.path]?.stamp { result.filesRead += 1 }
        guard !keepsPayloads, case .success(var log) = file.outcome, !log.payload.isEmpty else {
            if !keepsPayloads, case .success = file.outcome { result.headers[url.path] = file }
            return file
        }
        let size = log.payload.count
        log.payload = Data()
        var header = file
        header.outcome = .success(log)
        result.headers[url.path] = header
        guard result.payloadKept + size <= Self.payloadBudget else { return header }
        result.payloadKept += size
        return file
    }

    private func read(_ url: URL, known: FileObservation?) -> FileObservation?? {
        // (One `lstat`: Foundation's attributes also look up the owner's and group's names.)
        guard let identity = (try? FileSystem.identity(at: url.path)) ?? nil else { return nil }
        guard identity.kind == .regular else { return .some(nil) }
        let stamp = FileStamp(
            size: identity.size,
            modified: Date(
                timeIntervalSince1970: Double(identity.modificationSeconds)
                    + Double(identity.modificationNanoseconds) / 1e9
            ),
            inode: identity.inode
        )
        if let known, known.stamp == stamp { return known }
        let outcome: Result<LogFile, SyncError>
        if stamp.size > Int64(LogFile.maximumEncodedSize) {
            outcome = .failure(SyncError(.corruptLog, "\(stamp.size) bytes, larger than any log can be", url: url))
        } else {
            do {
                let data = try Data(contentsOf: url)
                outcome = Result { () throws(SyncError) in try LogFile.decode(data, url: url) }
                if case .success(let log) = outcome {
                    let scanned = ScannedLog(url: url, log: log)
                    return FileObservation(
                        url: url,
                        stamp: stamp,
                        outcome: .success(log),
                        dependencies: scanned.dependencies,
                        payloadDigest: scanned.payloadDigest,
                        payloadSize: scanned.payloadSize,
                        changeCount: scanned.changeCount
                    )
                }
            } catch let error as CocoaError where error.code == .fileReadNoSuchFile {
                return nil
            } catch {
                outcome = .failure(SyncError(.ioFailed, "cannot read the file", url: url, underlying: error))
            }
        }
        return FileObservation(url: url, stamp: stamp, outcome: outcome)
    }

    private func isDirectory(_ url: URL) -> Bool { SyncFiles.isFolder(url) }

    /// The names in `folder`; `nil` if it is missing and that means empty.
    private func list(_ folder: URL, missingIsEmpty: Bool, unavailable: Bool) throws(SyncError) -> [String]? {
        let listed: [String]?
        do {
            listed = try SyncFiles.listing(of: folder)
        } catch {
            throw SyncError(
                unavailable ? .containerUnavailable : .ioFailed,
                "cannot list the folder",
                url: folder,
                underlying: error
            )
        }
        if listed == nil, !missingIsEmpty {
            throw SyncError(
                unavailable ? .containerUnavailable : .ioFailed,
                "cannot list the folder: it is not there",
                url: folder,
                underlying: SystemCallError(systemCall: "opendir", errno: .noSuchFileOrDirectory, path: folder.path)
            )
        }
        return listed
    }
}
