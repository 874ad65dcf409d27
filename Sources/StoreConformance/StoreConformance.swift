import Foundation
import Persistence

/// The contract of `PersistentStore`, runnable against any store plugin: ours, and yours.
///
/// Each check opens stores of the plugin in a fresh temporary directory of its own (removed
/// afterwards), drives them through the public API only, and throws a ``ConformanceFailure``
/// that names the check, the store type, and what differed. Run one check per test case so each
/// shows up on its own:
///
/// ```swift
/// @Test(arguments: StoreConformance.checkNames)
/// func conformance(_ check: String) throws {
///     try StoreConformance(storeType: MyStore.self).run(check)
/// }
/// ```
///
/// A plugin is done when it passes every check. Checks about presenting files (events for other
/// objects' commits, removals and moves) hold the plugin to them only when
/// `StoreOptions.presentsFiles` is set in ``options``.
public struct StoreConformance: Sendable {
    /// The plugin under test.
    public let storeType: any PersistentStore.Type
    /// The options every store is opened with (checks about read-only stores set
    /// `StoreOptions.isReadOnly` on a copy).
    public var options: StoreOptions
    /// Where each check makes its temporary directory; the system's temporary directory when
    /// `nil`.
    public var directory: URL?
    /// How long a check waits for a store to report an event before it fails.
    public var eventTimeout: Duration

    /// A conformance run for `storeType`, opening its stores with `options`.
    public init(
        storeType: any PersistentStore.Type,
        options: StoreOptions = StoreOptions(),
        directory: URL? = nil,
        eventTimeout: Duration = .seconds(10)
    ) {
        self.storeType = storeType
        self.options = options
        self.directory = directory
        self.eventTimeout = eventTimeout
    }

    /// The names of every check, in the order ``runAll()`` runs them.
    public static let checkNames: [String] = checks.map(\.name)

    /// What each check holds a store to, by name.
    public static let checkSummaries: [String: String] = Dictionary(
        uniqueKeysWithValues: checks.map { ($0.name, $0.summary) }
    )

    /// Runs the check named `name`.
    ///
    /// - Throws: ``ConformanceFailure`` when the store breaks the contract, or when `name` is not
    ///   one of ``checkNames``.
    public func run(_ name: String) throws {
        guard let check = Self.checks.first(where: { $0.name == name }) else {
            throw ConformanceFailure(
                check: name,
                storeType: storeType.storeType,
                message: "no such check (known: \(Self.checkNames.joined(separator: ", ")))"
            )
        }
        let base = directory ?? URL(fileURLWithPath: NSTemporaryDirectory(), isDirectory: true)
        let folder = base.resolvingSymlinksInPath().appendingPathComponent(
            "conformance-\(Self.sanitized(storeType.storeType))-\(name)-\(UUID().uuidString)",
            isDirectory: true
        )
        let context = CheckContext(
            check: name,
            storeType: storeType,
            options: options,
            directory: folder,
            eventTimeout: Double(eventTimeout.components.seconds) + Double(eventTimeout.components.attoseconds) / 1e18
        )
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        } catch {
            throw context.failure("cannot create the check's directory \(folder.path): \(error)")
        }
        defer { try? FileManager.default.removeItem(at: folder) }
        try check.body(context)
    }

    /// Runs every check, each after the previous one, whether or not it failed.
    ///
    /// - Throws: ``ConformanceFailures`` listing every failed check.
    public func runAll() throws {
        var failures: [ConformanceFailure] = []
        for name in Self.checkNames {
            do {
                try run(name)
            } catch let failure as ConformanceFailure {
                failures.append(failure)
            } catch {
                failures.append(
                    ConformanceFailure(check: name, storeType: storeType.storeType, message: "threw \(error)")
                )
            }
        }
        if !failures.isEmpty { throw ConformanceFailures(failures) }
    }

    static func sanitized(_ text: String) -> String {
        String(text.map { $0.isLetter || $0.isNumber ? $0 : "-" })
    }
}

/// One check: a name, what it holds the store to, and the code.
struct Check: Sendable {
    var name: String
    var summary: String
    var body: @Sendable (CheckContext) throws -> Void
}

extension StoreConformance {
    static let checks: [Check] = [
        Check(
            name: "creation",
            summary:
                "a new store: files(at:) lists the main file first, the file exists, metadata carries a store identifier and the schema's version, the identifier survives close and reopen, every entity is empty",
            body: Checks.creation
        ),
        Check(
            name: "roundTripAttributes",
            summary:
                "every attribute type, with edge values, reads back exactly from the same object and after reopening",
            body: Checks.roundTripAttributes
        ),
        Check(
            name: "roundTripNonFiniteDoubles",
            summary: "infinities and NaN read back",
            body: Checks.roundTripNonFiniteDoubles
        ),
        Check(
            name: "roundTripRelationships",
            summary: "to-one, to-many and many-to-many relationships read back exactly",
            body: Checks.roundTripRelationships
        ),
        Check(
            name: "insertReplaces",
            summary: "inserting a record whose id exists replaces it whole",
            body: Checks.insertReplaces
        ),
        Check(
            name: "propertyUpdates",
            summary:
                "updates set only the properties they name; null clears; nil clears a to-one; a to-many set is replaced",
            body: Checks.propertyUpdates
        ),
        Check(
            name: "commitOrder",
            summary:
                "inserts, then updates, then deletes; an update of a missing record is dropped; deleting a missing id does nothing",
            body: Checks.commitOrder
        ),
        Check(
            name: "incompleteRecordsAccepted",
            summary: "records missing required values are stored as given (validation is the context's)",
            body: Checks.incompleteRecordsAccepted
        ),
        Check(
            name: "metadataEntries",
            summary: "metadata entries are set and removed with the commit and survive reopening",
            body: Checks.metadataEntries
        ),
        Check(
            name: "metadataPrefixes",
            summary:
                "metadata entries read by key prefix come in UTF-8 key order, a page at a time, and nothing outside the prefix",
            body: Checks.metadataPrefixes
        ),
        Check(
            name: "invalidCommitsChangeNothing",
            summary:
                "a commit that does not fit the schema throws invalidRequest and changes neither data nor metadata",
            body: Checks.invalidCommitsChangeNothing
        ),
        Check(
            name: "differentialFetch",
            summary:
                "random predicates, sorts, limits and offsets fetch exactly what FetchRequest.evaluate(over:) does; count(for:) ignores limit and offset",
            body: Checks.differentialFetch
        ),
        Check(
            name: "recordsWithIDs",
            summary: "records(with:) returns the held records among the ids",
            body: Checks.recordsWithIDs
        ),
        Check(
            name: "enumerateRecords",
            summary: "enumerateRecords pages through every record once, in id order",
            body: Checks.enumerateRecords
        ),
        Check(
            name: "invalidRequests",
            summary: "fetches that do not fit the schema throw invalidRequest",
            body: Checks.invalidRequests
        ),
        Check(
            name: "closedStore",
            summary: "every call on a closed store throws storeClosed; closing twice does nothing",
            body: Checks.closedStore
        ),
        Check(
            name: "persistence",
            summary: "commits survive reopening, and are on disk before the committing object is closed",
            body: Checks.persistence
        ),
        Check(
            name: "concurrentCommitsOneObject",
            summary: "one store object used from several threads at once loses nothing",
            body: Checks.concurrentCommitsOneObject
        ),
        Check(
            name: "sharedFileVisibility",
            summary: "two store objects on one file: each one's commits show in the other's fetches and metadata",
            body: Checks.sharedFileVisibility
        ),
        Check(
            name: "sharedFileNoLostUpdates",
            summary: "two store objects on one file committing disjoint changes, in turn and at once: all survive",
            body: Checks.sharedFileNoLostUpdates
        ),
        Check(
            name: "sharedFileEvents",
            summary:
                "a presenting store reports another object's commit as changedExternally, after which it fetches the new contents",
            body: Checks.sharedFileEvents
        ),
        Check(
            name: "removalEvent",
            summary: "a presenting store whose files are deleted reports removed and then throws storeRemoved",
            body: Checks.removalEvent
        ),
        Check(
            name: "moveEvent",
            summary: "a presenting store whose files are moved reports moved, follows them, and keeps working",
            body: Checks.moveEvent
        ),
        Check(
            name: "schemaEvolution",
            summary:
                "a store of an older version opens with a newer schema: new attributes get their defaults, removed ones go, new entities work, the identity stays",
            body: Checks.schemaEvolution
        ),
        Check(
            name: "newerSchemaRejected",
            summary: "a store of a newer version throws newerSchema naming the file, which is left unchanged",
            body: Checks.newerSchemaRejected
        ),
        Check(
            name: "incompatibleSchemaRejected",
            summary:
                "same version with other entities, or a changed attribute type: incompatibleSchema naming the file, left unchanged",
            body: Checks.incompatibleSchemaRejected
        ),
        Check(
            name: "garbageFile",
            summary:
                "a file of random bytes throws corruptStore or notAStore naming the file, and nothing on disk changes",
            body: Checks.garbageFile
        ),
        Check(
            name: "truncatedFile",
            summary:
                "a truncated copy of a real store throws corruptStore or notAStore naming the file, and nothing on disk changes",
            body: Checks.truncatedFile
        ),
        Check(
            name: "readOnly",
            summary: "read-only stores create and change nothing on disk; commits throw readOnly",
            body: Checks.readOnly
        ),
    ]
}

/// The checks' code, one static function per check.
enum Checks {}
