import ConcordSystem
import FileCoordination
import Foundation

/// One device's entry in a container's sentinel: the record that the device takes part in
/// syncing the store.
public struct DeviceRegistration: Codable, Sendable, Hashable {
    /// The device's id (its folder's name in the container).
    public var device: String
    /// When the device registered (its wall clock).
    public var registered: Date
    /// When the device left (only in sentinels that keep removals as entries, such as
    /// ``DeviceListSentinel``); `nil` while registered.
    public var removed: Date?
    /// The host the device ran on when it registered, for people reading the container.
    public var host: String?
    /// The schema version the device synced with when it registered.
    public var schemaVersion: Int?
    /// Where the device's log numbering last leapt to (it was restored, or found its id's history
    /// in the container), `nil` if it never leapt. An installation that restores this device id
    /// later, before its copy of the container shows the logs, numbers past it: its logs never
    /// take the names of logs the earlier installation wrote after its leap.
    public var numberingFrom: UInt64?

    /// A registration made now.
    public init(
        device: String,
        registered: Date = Date(),
        host: String? = nil,
        schemaVersion: Int? = nil,
        numberingFrom: UInt64? = nil
    ) {
        self.device = device
        self.registered = registered
        self.host = host
        self.schemaVersion = schemaVersion
        self.numberingFrom = numberingFrom
    }

    /// The later of the registration and the removal: what decides between two entries of one
    /// device.
    var stamp: Date { max(registered, removed ?? .distantPast) }

    /// Whether `other` says what this says but for when: the same device, host, schema
    /// version and numbering, both registered. Registering again over such an entry writes
    /// nothing.
    func isEquivalent(to other: DeviceRegistration) -> Bool {
        device == other.device && host == other.host && schemaVersion == other.schemaVersion
            && numberingFrom == other.numberingFrom && removed == nil && other.removed == nil
    }
}

/// What a sentinel holds now.
public struct SentinelContents: Sendable {
    /// The devices registered, sorted by device id.
    public var registrations: [DeviceRegistration] = []
    /// Files of the sentinel that could not be read (damaged, truncated, foreign), each an error
    /// naming the file. The registrations that could be read are still reported.
    public var problems: [SyncError] = []

    /// Contents.
    public init(registrations: [DeviceRegistration] = [], problems: [SyncError] = []) {
        self.registrations = registrations.sorted { $0.device.utf8.lexicographicallyPrecedes($1.device.utf8) }
        self.problems = problems
    }

    /// Whether `device` is registered.
    public func contains(_ device: String) -> Bool { registrations.contains { $0.device == device } }
}

/// The record, kept in a shared container, of which devices take part in syncing a store.
///
/// A device registers when it enables sync and unregisters when it disables it. While it syncs,
/// ``FolderSync`` watches the sentinel: when the container disappears, or this device's
/// registration is gone (someone reset the container, or removed the device), it stops syncing,
/// keeps the local store intact and tells the app once. When a device that contributed before
/// enables sync again and finds no registration of its own, it is a returning device, and the
/// app chooses what happens to its data (``SyncJoinPolicy``).
///
/// Two strategies ship: ``DeviceFileSentinel`` (the default: one file per device, so nothing
/// shared is ever written twice) and ``DeviceListSentinel`` (one device-list property list,
/// updated under coordination, with a sync engine's conflict copies merged back). Write your own
/// by conforming to this protocol; every method may be called from any thread.
public protocol SyncSentinel: Sendable {
    /// The folder the sentinel's files live in (created by ``register(_:)``); watched while
    /// syncing, with an item query for ``filePattern``.
    var folder: URL { get }
    /// A shell pattern (`fnmatch(3)`) that the names of the sentinel's files match.
    var filePattern: String { get }
    /// Reads the registrations. A missing sentinel has none.
    ///
    /// - Throws: ``SyncError`` with ``SyncError/Code/containerUnavailable`` when the folder
    ///   cannot be read at all. Damaged files are reported in ``SentinelContents/problems``.
    func contents() throws -> SentinelContents
    /// Whether `device` is registered; cheaper than ``contents()`` where the strategy allows.
    /// Throws when it cannot tell (a damaged sentinel, an unreadable folder).
    func isRegistered(_ device: String) throws -> Bool
    /// `device`'s registration, `nil` if it has none; cheaper than ``contents()`` where the
    /// strategy allows. Throws when it cannot tell (a damaged sentinel, an unreadable folder).
    func registration(of device: String) throws -> DeviceRegistration?
    /// Records `registration`, replacing an earlier one of the same device. The shipped
    /// sentinels write nothing when the device's registration is there already, readable and
    /// the same but for its date: a launch leaves the shared folder as it was, so a file-sync
    /// engine has nothing to carry.
    func register(_ registration: DeviceRegistration) throws
    /// Removes `device`'s registration; does nothing if there is none.
    func unregister(_ device: String) throws
}

extension SyncSentinel {
    /// `device`'s registration among ``contents()``; a damaged file among them throws.
    public func registration(of device: String) throws -> DeviceRegistration? {
        let contents = try contents()
        if let found = contents.registrations.first(where: { $0.device == device }) { return found }
        if let problem = contents.problems.first { throw problem }
        return nil
    }
}

// MARK: - One file per device

/// The default sentinel: one small property list per device, `STORE/sentinels/DEVICE.plist`,
/// written only by that device (atomically: temporary file, `fsync`, rename). Since no file is
/// ever written by two devices, file-sync engines never make conflict copies of it. Files whose
/// name and content disagree, or that do not decode, are reported as problems and skipped.
public struct DeviceFileSentinel: SyncSentinel {
    /// The folder of registrations: `storeFolder/sentinels`.
    public let folder: URL
    /// `*.plist`.
    public var filePattern: String { "*.plist" }

    /// The sentinel of `layout`'s store.
    public init(layout: ContainerLayout) {
        folder = layout.storeFolder.appendingPathComponent("sentinels", isDirectory: true)
    }

    /// Where `device`'s registration lives.
    public func url(of device: String) -> URL {
        folder.appendingPathComponent(device + ".plist", isDirectory: false)
    }

    public func contents() throws -> SentinelContents {
        let listed: [String]?
        do {
            listed = try SyncFiles.listing(of: folder)
        } catch {
            throw SyncError(.containerUnavailable, "cannot list the sentinel folder", url: folder, underlying: error)
        }
        guard let names = listed else { return SentinelContents() }
        var registrations: [DeviceRegistration] = []
        var problems: [SyncError] = []
        for name in names.sorted() where name.hasSuffix(".plist") {
            let device = String(name.dropLast(".plist".count))
            // Temporaries, conflict copies and strays are not registrations.
            guard ContainerLayout.isValidDeviceID(device) else { continue }
            do {
                guard let registration = try read(url(of: device)) else { continue }
                registrations.append(registration)
            } catch {
                problems.append(error)
            }
        }
        return SentinelContents(registrations: registrations, problems: problems)
    }

    public func isRegistered(_ device: String) throws -> Bool {
        try read(url(of: device)) != nil
    }

    public func registration(of device: String) throws -> DeviceRegistration? {
        try read(url(of: device))
    }

    public func register(_ registration: DeviceRegistration) throws {
        guard ContainerLayout.isValidDeviceID(registration.device) else {
            throw SyncError(.invalidDeviceID, "\"\(registration.device)\" cannot name a device", url: folder)
        }
        var registration = registration
        registration.removed = nil
        // (Missing, unreadable or different: written. The same: left alone.)
        if let existing = try? read(url(of: registration.device)), existing.isEquivalent(to: registration) { return }
        try SentinelFiles.createFolder(folder)
        try SentinelFiles.write(SentinelFiles.encode(registration), to: url(of: registration.device))
    }

    public func unregister(_ device: String) throws {
        try SentinelFiles.remove(url(of: device))
    }

    /// The registration in `url`; `nil` if there is no such file.
    private func read(_ url: URL) throws(SyncError) -> DeviceRegistration? {
        guard let data = try SentinelFiles.read(url) else { return nil }
        let registration: DeviceRegistration = try SentinelFiles.decode(data, url: url)
        guard registration.device + ".plist" == url.lastPathComponent else {
            throw SyncError(
                .corruptSentinel,
                "the registration names device \"\(registration.device)\", not its file's",
                url: url
            )
        }
        return registration
    }
}

// MARK: - Files

/// The file operations both sentinels share: coordinated, atomic, with errors that name the file.
package enum SentinelFiles {
    static let coordinator = FileCoordinator()
    /// Registrations larger than this are not registrations.
    static let maximumSize = 1 << 20

    package static func encode<T: Encodable>(_ value: T) throws -> Data {
        let encoder = PropertyListEncoder()
        encoder.outputFormat = .binary
        return try encoder.encode(value)
    }

    package static func decode<T: Decodable>(_ data: Data, url: URL) throws(SyncError) -> T {
        guard data.count <= maximumSize else {
            throw SyncError(
                .corruptSentinel,
                "the sentinel file is \(data.count) bytes, more than a sentinel can be",
                url: url
            )
        }
        do {
            return try PropertyListDecoder().decode(T.self, from: data)
        } catch {
            throw SyncError(.corruptSentinel, "the sentinel file cannot be read: \(error)", url: url)
        }
    }

    /// The file's bytes, `nil` if it does not exist.
    static func read(_ url: URL) throws(SyncError) -> Data? {
        do {
            let handle = try FileHandle(forReadingFrom: url)
            defer { try? handle.close() }
            return try handle.read(upToCount: maximumSize + 1) ?? Data()
        } catch let error as CocoaError where error.code == .fileReadNoSuchFile || error.code == .fileNoSuchFile {
            return nil
        } catch {
            if (error as NSError).code == Int(ENOENT) { return nil }
            throw SyncError(.ioFailed, "cannot read the sentinel file", url: url, underlying: error)
        }
    }

    static func write(_ data: Data, to url: URL) throws {
        do {
            try coordinator.replaceContentsOfItem(at: url, with: data)
        } catch {
            throw SyncError(.ioFailed, "cannot write the sentinel file", url: url, underlying: error)
        }
    }

    /// Writes `data` as the file at `url` only if nothing has that name (a file written once and
    /// never replaced); returns whether it did.
    static func create(_ data: Data, at url: URL) throws -> Bool {
        do {
            var created = false
            try coordinator.coordinate(writingItemAt: url) { url in
                created = try data.withUnsafeBytes { buffer in try AtomicFile.create(buffer, at: url.path) }
            }
            return created
        } catch {
            throw SyncError(.ioFailed, "cannot write the sentinel file", url: url, underlying: error)
        }
    }

    static func remove(_ url: URL) throws {
        guard SyncFiles.exists(url) else { return }
        do {
            try coordinator.removeItem(at: url)
        } catch {
            guard SyncFiles.exists(url) else { return }
            throw SyncError(.ioFailed, "cannot remove the sentinel file", url: url, underlying: error)
        }
    }

    static func createFolder(_ folder: URL) throws {
        do {
            try SyncFiles.createFolder(folder)
        } catch {
            throw SyncError(
                .containerUnavailable,
                "cannot create the sentinel's folder",
                url: folder,
                underlying: error
            )
        }
    }
}
