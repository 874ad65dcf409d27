import ConcordSystem
import Foundation
import Persistence
import Synchronization

/// `STORE/container.plist`: which container this is, written once by the device that starts it.
package struct ContainerIdentity: Codable {
    package var id: String
    package var created: Date
    package var device: String
    /// The identities of the container this one replaced (a device replaced it with its own
    /// data); absent in a new container, and in identities written before it existed.
    package var replaces: [String]?
}

/// The container's identity as this device sees it: the identity file (and its conflict
/// copies), the ids this device recorded when it joined and those of containers whose logs it
/// applied, and the identity a join's logs carry while it runs.
final class ContainerIdentities: SyncPart, Sendable {
    let context: SyncContext
    /// While a join runs: the container identity its logs carry (the container joined, which the
    /// store records only once the join is done).
    private let joiningContainer = Mutex<String?>(nil)

    init(context: SyncContext) { self.context = context }

    /// `STORE/container.plist`: the container's identity, written once by the device that starts
    /// it (a new container, or one replaced with a device's data). Two devices starting one at
    /// once leave a sync engine's conflict copy: every id found names the same container.
    var identityURL: URL { layout.storeFolder.appendingPathComponent("container.plist", isDirectory: false) }

    /// The ids the container's identity file and its conflict copies hold (empty: no identity,
    /// as in containers started before it existed). Damaged files are reported and skipped.
    func containerIDs() -> Set<String> {
        Set(containerIdentities().map(\.id))
    }

    /// The container's identity file and its conflict copies, read.
    func containerIdentities() -> [ContainerIdentity] {
        let names = SyncFiles.names(in: layout.storeFolder)
        var identities: [ContainerIdentity] = []
        for name in names where Self.isIdentityFileName(name) {
            let url = layout.storeFolder.appendingPathComponent(name, isDirectory: false)
            do {
                guard let data = try SentinelFiles.read(url) else { continue }
                identities.append(try SentinelFiles.decode(data, url: url))
            } catch {
                reportSentinelProblems([error])
            }
        }
        return identities
    }

    /// Whether `name` is the container's identity file or a conflict copy of it.
    static func isIdentityFileName(_ name: String) -> Bool {
        name == "container.plist"
            || (name.hasPrefix("container") && name.hasSuffix(".plist") && name.contains("onflict"))
    }

    /// Whether the container's identity file, or a conflict copy of it, is there, readable or
    /// not. One that cannot be read (cut short while a sync engine still writes it, or damaged)
    /// hides an identity, which may well be the one this device recorded: a folder holding it
    /// is not one with no identity.
    func hasIdentityFile() -> Bool {
        let names = SyncFiles.names(in: layout.storeFolder)
        return names.contains(where: Self.isIdentityFileName)
    }

    /// The ids of the container this device joined last, as it recorded them (empty: none).
    func recordedContainerIDs() -> Set<String> {
        guard let joined = (try? store.syncMetadataValue(SyncMetadata.container)) ?? nil else { return [] }
        return Set(joined)
    }

    /// The ids of ``SyncMetadata/metContainers`` (empty: none).
    func metContainerIDs() -> Set<String> {
        guard let met = (try? store.syncMetadataValue(SyncMetadata.metContainers)) ?? nil else { return [] }
        return Set(met)
    }

    /// Records the container's identity when this device joined with none in sight (its copy of
    /// the container still filling on a new machine, or a container from before identities) and
    /// one has appeared since: from then on a replacement of this container is recognised, as
    /// for a device that saw the identity when it joined. Ids once recorded are left as they are
    /// (the logs carry the smallest). The caller holds the sync lock.
    func recordAppearedIdentity() throws {
        guard recordedContainerIDs().isEmpty else { return }
        let ids = containerIDs()
        guard !ids.isEmpty else { return }
        var changes = SyncMetadataChanges()
        try changes.set(SyncMetadata.container, ids.sorted())
        try store.commit(StoreChanges(syncMetadata: changes))
        logger.debug(
            "recorded the container's identity, which appeared after this device joined",
            metadata: ["concord.device": "\(deviceID)", "concord.file": "\(identityURL.path)"]
        )
    }

    /// The container identity this device's logs and baselines carry: the smallest of the ids
    /// it recorded when it joined (`nil`: none, as in a container from before identities).
    func loggedContainer() -> String? {
        loggedContainer((try? store.syncMetadataValue(SyncMetadata.container)) ?? nil)
    }

    /// The container a join under way carries (`nil`: no join runs).
    var joining: String? { joiningContainer.withLock { $0 } }

    /// The container identity a log carries, from the recorded ids' entry (during a join, the
    /// container being joined).
    func loggedContainer(_ recorded: [String]?) -> String? {
        if let joining = joiningContainer.withLock({ $0 }) { return joining }
        return recorded?.min().flatMap { LogFile.isValidContainer($0) ? $0 : nil }
    }

    /// Runs `body` (a join's work) with the logs it makes carrying `container`'s identity.
    func joining<T>(_ container: String?, _ body: () throws -> T) rethrows -> T {
        let valid = container.flatMap { LogFile.isValidContainer($0) ? $0 : nil }
        let previous = joiningContainer.withLock { current in
            defer { current = valid ?? current }
            return current
        }
        defer { joiningContainer.withLock { $0 = previous } }
        return try body()
    }

    /// The identities that containers here say they replaced: logs and baselines written for one
    /// of them are not applied (their writers had not seen the replacement).
    /// (Also those this device replaced itself, as it recorded them: its copy of the container may
    /// lack the identity file that says so for a while.)
    func replacedContainers() -> Set<String> {
        let recorded = (try? store.syncMetadataValue(SyncMetadata.replacedContainers)) ?? nil
        return Set(containerIdentities().flatMap { $0.replaces ?? [] }).union(recorded ?? [])
    }

    /// Writes a new identity (the container is new, or replaced: `replacing` names the
    /// identities it replaces); returns the container's. A new container's identity never
    /// replaces one another device wrote meanwhile: on a folder shared without a sync engine in
    /// between (NFS, one machine's folder), two devices starting it at once see each other's file
    /// at once, and the second joins the first one's container (through a sync engine, each
    /// writes its own and the engine keeps the other as a conflict copy).
    func startContainerIdentity(replacing: Set<String> = []) throws -> String {
        let identity = ContainerIdentity(
            id: try StoreMetadata.makeCheckedIdentifier().uuidString,
            created: Date(),
            device: deviceID,
            replaces: replacing.isEmpty ? nil : replacing.sorted()
        )
        if !replacing.isEmpty {
            let recorded = (try store.syncMetadataValue(SyncMetadata.replacedContainers)) ?? []
            var changes = SyncMetadataChanges()
            try changes.set(SyncMetadata.replacedContainers, Set(recorded).union(replacing).sorted())
            try store.commit(StoreChanges(syncMetadata: changes))
        }
        let data = try SentinelFiles.encode(identity)
        guard replacing.isEmpty else {
            try SentinelFiles.write(data, to: identityURL)
            return identity.id
        }
        if try SentinelFiles.create(data, at: identityURL) { return identity.id }
        logger.debug(
            "another device started the container first: joining its identity",
            metadata: ["concord.device": "\(deviceID)", "concord.file": "\(identityURL.path)"]
        )
        return containerIDs().min() ?? identity.id
    }

    /// Whether the container is the one this device joined: false when an identity there says it
    /// replaced one this device recorded; otherwise true when either side has no identity to
    /// compare (a container or a join from before identities), when an identity this device
    /// recorded is there, or when the container still holds this device's own history (its
    /// acknowledgement). Two devices that start a container at once each write an identity; a
    /// sync engine keeps one and turns the other into a conflict copy, which reaches the devices
    /// later than the winner does: meanwhile one of them sees only the other's identity. A
    /// container another device replaced has lost this device's folder with everything in it,
    /// unless this device wrote into it again before it saw the replacement: hence `replaces`.
    /// With `countingMet`, an identity that replaces a container whose logs this device applied
    /// (``SyncMetadata/metContainers``) makes it another container too: this device holds data the others
    /// gave up with the replaced container, and would keep it for good were it never told.
    func isSameContainer(countingMet: Bool = true) -> Bool {
        let recorded = recordedContainerIDs()
        let identities = containerIdentities()
        if countingMet, Self.replaces(metContainerIDs(), identities) { return false }
        guard !recorded.isEmpty else { return true }
        if Self.replaces(recorded, identities) { return false }
        let ids = Set(identities.map(\.id))
        // (No identity: a copy still filling, unless this device saw the container deleted.)
        if ids.isEmpty { return !sawContainerDeleted() }
        if !ids.isDisjoint(with: recorded) { return true }
        let own = layout.deviceFolder(deviceID).appendingPathComponent(ContainerLayout.acknowledgementName)
        return Data(contentsOf: own, atMost: 1 << 20).flatMap {
            try? JSONDecoder().decode(SyncAcknowledgement.self, from: $0)
        }?
        .device == deviceID
    }

    /// Whether an identity in the container says it replaced one this device recorded, or one
    /// whose logs it applied (``SyncMetadata/metContainers``).
    func isReplacedContainer() -> Bool {
        let recorded = recordedContainerIDs().union(metContainerIDs())
        return !recorded.isEmpty && Self.replaces(recorded, containerIdentities())
    }

    /// Whether this device saw the container deleted since it last joined one.
    func sawContainerDeleted() -> Bool {
        (try? store.hasSyncMetadata(SyncMetadata.containerGone)) == true
    }

    static func replaces(_ recorded: Set<String>, _ identities: [ContainerIdentity]) -> Bool {
        identities.contains { !Set($0.replaces ?? []).isDisjoint(with: recorded) }
    }
}
