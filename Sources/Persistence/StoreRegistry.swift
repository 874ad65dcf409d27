import Foundation
import Synchronization

/// The store plugins an app can open by type name.
///
/// Plugins do not register themselves (Swift has no load-time hooks): an app registers the
/// ones it uses once at startup, `StoreRegistry.shared.register(SQLiteStore.self)`, and may add
/// its own next to them.
public final class StoreRegistry: Sendable {
    /// The registry store coordinators use unless given another.
    public static let shared = StoreRegistry()

    private let types = Mutex<[String: any PersistentStore.Type]>([:])

    /// An empty registry.
    public init() {}

    /// Registers `type` under its ``PersistentStore/storeType``, replacing any plugin
    /// registered under that name.
    public func register(_ type: any PersistentStore.Type) {
        types.withLock { $0[type.storeType] = type }
    }

    /// The plugin registered as `name`.
    public func storeType(named name: String) throws(PersistenceError) -> any PersistentStore.Type {
        guard let type = types.withLock({ $0[name] }) else {
            let known = registeredTypeNames.joined(separator: ", ")
            throw PersistenceError(
                .unknownStoreType,
                "no store plugin is registered as \"\(name)\" (registered: \(known.isEmpty ? "none" : known))"
            )
        }
        return type
    }

    /// The names of the registered plugins, sorted.
    public var registeredTypeNames: [String] { types.withLock { $0.keys.sorted() } }
}
